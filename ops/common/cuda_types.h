#pragma once
// The type a CUDA kernel accumulates in for each storage type: float for 16-bit storage,
// else the type itself. Torch-free and usable from host code (an op's *_cuda.cpp sizes
// its workspaces with it); the device conversions are in common/cuda_convert.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ops_common {

template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<__half> { using type = float; };
template <> struct acc_type<__nv_bfloat16> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

}  // namespace ops_common
