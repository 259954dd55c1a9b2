#pragma once
// The 16-bit storage types of the torch-free CUDA launchers, and the type a kernel
// accumulates in for each storage type: float for 16-bit storage, else the type itself.
//
// half_t and bfloat16_t hold the bits of an IEEE half and of a bfloat16, the layout of
// at::Half / at::BFloat16 and of CUDA's __half / __nv_bfloat16 (common/cuda_host.h maps
// ATen's types to them). They are storage, not arithmetic: a kernel loads them with
// to_acc, computes in float and stores with from_acc (common/cuda_convert.cuh). They
// stand in for cuda_fp16.h and cuda_bf16.h, whose ten thousand lines every phase of nvcc
// parses again on every edit of a .cu (a part of every rebuild: experiments/RESULTS.md,
// "Measurements behind the build's decisions"). A kernel that wants CUDA's 16-bit
// intrinsics includes those headers itself and moves the bits across
// (__ushort_as_half(h.bits), __half_as_ushort, and the bfloat16 pair).
// Torch-free and usable from host code (an op's *_cuda.cpp sizes its workspaces with it).
#include <cstdint>

namespace ops_common {

struct alignas(2) half_t {
  uint16_t bits;
};
struct alignas(2) bfloat16_t {
  uint16_t bits;
};

template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<half_t> { using type = float; };
template <> struct acc_type<bfloat16_t> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

}  // namespace ops_common
