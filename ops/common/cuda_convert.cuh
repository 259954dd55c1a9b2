#pragma once
// Loads and stores between a kernel's storage type and its float/double accumulator,
// for torch-free .cu files. torch's nvcc flags disable the implicit __half and
// __nv_bfloat16 conversions, so every conversion is spelled out here once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_types.h"

namespace ops_common {

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace ops_common
