#pragma once
// Host side of a CUDA backend (an op's *_cuda.cpp): the stream and device guard, and the
// mapping from ATen's scalar types to the storage types that torch-free launchers take
// (common/cuda_types.h: at::Half / at::BFloat16 have the bit layout of half_t / bfloat16_t).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/cuda_types.h"

namespace ops_common {

template <typename T> struct cuda_type { using type = T; };
template <> struct cuda_type<c10::Half> { using type = half_t; };
template <> struct cuda_type<c10::BFloat16> { using type = bfloat16_t; };
template <typename T> using cuda_t = typename cuda_type<T>::type;

// A tensor's data as the CUDA type its launcher takes.
template <typename scalar_t>
inline cuda_t<scalar_t>* cuda_ptr(at::Tensor& t) {
  return reinterpret_cast<cuda_t<scalar_t>*>(t.data_ptr<scalar_t>());
}
template <typename scalar_t>
inline const cuda_t<scalar_t>* cuda_ptr(const at::Tensor& t) {
  return reinterpret_cast<const cuda_t<scalar_t>*>(t.const_data_ptr<scalar_t>());
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace ops_common

// A launcher returns cudaGetLastError() after its launches; this turns a failure into a
// c10::Error naming the CUDA error, as C10_CUDA_KERNEL_LAUNCH_CHECK does.
#if defined(OPS_DEBUG)  // a debug build's launch checks say what failed (common/debug_launch.h)
#include "common/debug_launch.h"
#define OPS_CHECK_LAUNCH(expr)                                                                \
  do {                                                                                       \
    const cudaError_t ops_launch_error_ = (expr);                                            \
    TORCH_CHECK(ops_launch_error_ == cudaSuccess, "CUDA error: ", cudaGetErrorString(ops_launch_error_), \
            ::ops_common::debug::launch_detail());                                          \
  } while (0)
#else
#define OPS_CHECK_LAUNCH(expr) C10_CUDA_CHECK(expr)
#endif
