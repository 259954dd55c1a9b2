#pragma once
// Loads and stores between a kernel's storage type and its float/double accumulator,
// for torch-free .cu files: the PTX conversions that CUDA's __half2float,
// __float2half_rn, __bfloat162float and __float2bfloat16_rn compile to (round to
// nearest even), on the storage types of common/cuda_types.h.
#include <cstdint>

#include "common/cuda_types.h"

namespace ops_common {

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(half_t v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float to_acc(bfloat16_t v) {
  float f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(v.bits));
#else
  asm("mov.b32 %0, {0, %1};" : "=f"(f) : "h"(v.bits));
#endif
  return f;
}

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ half_t from_acc<half_t>(float v) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
template <> __device__ __forceinline__ bfloat16_t from_acc<bfloat16_t>(float v) {
  bfloat16_t b;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(v));
#else
  // No bfloat16 conversion before sm_80: round to nearest even at bit 16, as CUDA's
  // headers do there; NaN becomes the canonical 0x7fff.
  const uint32_t u = __float_as_uint(v);
  b.bits = v != v ? uint16_t(0x7fffu) : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return b;
}

// A load through the read-only data cache (__ldg, as const __restrict__ pointers get),
// for every storage type: CUDA has __ldg for the built-in types only.
template <typename T> __device__ __forceinline__ T load_readonly(const T* p) { return __ldg(p); }
__device__ __forceinline__ half_t load_readonly(const half_t* p) { return {__ldg(&p->bits)}; }
__device__ __forceinline__ bfloat16_t load_readonly(const bfloat16_t* p) {
  return {__ldg(&p->bits)};
}

}  // namespace ops_common
