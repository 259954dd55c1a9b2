#pragma once
// The standard-library names the shared device headers, and an op's own math header, use:
// std::is_same_v, std::index_sequence, std::memcpy, std::min/max, and the math a kernel
// reaches for (MATH below), plus ops_common::rsqrt, which the standard lacks.
// On the host and under nvcc they come from the standard headers. Under NVRTC, which ships
// no standard library, they come from libcu++'s per-facility headers: its umbrella headers
// (<cuda/std/type_traits>, <cuda/std/utility>, <cuda/std/cmath>, what jit_tools/
// nvrtc_include maps <type_traits>, <utility> and <cmath> to) take NVRTC several times as
// long to parse as the kernels and swell its precompiled header, most of a kernel edit's
// compile; the per-facility headers of the type traits take a fraction of that, and the
// math comes from CUDA's math functions (figures: experiments/RESULTS.md, section
// kernel-edit-loop). A libcu++ without these headers gets the umbrella ones.
// tests/test_nvrtc.py compiles every name listed here through NVRTC.
#if defined(__CUDACC_RTC__) && __has_include(<cuda/std/__type_traits/is_same.h>)
#include <cstdint>
#include <cuda/std/__type_traits/is_same.h>
#include <cuda/std/__utility/integer_sequence.h>
#include <cuda/std/cstring>
namespace std {
using namespace ::cuda::std;
// The math: CUDA's own functions, which NVRTC declares without any header. libcu++'s
// <cuda/std/__cmath/*.h> wrap the same functions but add about 20 ms each to every
// compile, even from a precompiled header (experiments/RESULTS.md, kernel-edit-loop).
// Declared here, in std itself, they hide libcu++'s names of the same spelling (a
// qualified std:: lookup looks into a using-directive only when std has none of its own).
#define OPS_STD_LITE_UNARY(name)                                      \
  __device__ inline float name(float x) { return ::name##f(x); }      \
  __device__ inline double name(double x) { return ::name(x); }
#define OPS_STD_LITE_BINARY(name)                                              \
  __device__ inline float name(float a, float b) { return ::name##f(a, b); }   \
  __device__ inline double name(double a, double b) { return ::name(a, b); }
// MATH: what <cmath> gives on the host, for float and double.
OPS_STD_LITE_UNARY(fabs)
OPS_STD_LITE_UNARY(sqrt)
OPS_STD_LITE_UNARY(cbrt)
OPS_STD_LITE_UNARY(exp)
OPS_STD_LITE_UNARY(exp2)
OPS_STD_LITE_UNARY(expm1)
OPS_STD_LITE_UNARY(log)
OPS_STD_LITE_UNARY(log2)
OPS_STD_LITE_UNARY(log10)
OPS_STD_LITE_UNARY(log1p)
OPS_STD_LITE_UNARY(erf)
OPS_STD_LITE_UNARY(erfc)
OPS_STD_LITE_UNARY(sin)
OPS_STD_LITE_UNARY(cos)
OPS_STD_LITE_UNARY(tan)
OPS_STD_LITE_UNARY(asin)
OPS_STD_LITE_UNARY(acos)
OPS_STD_LITE_UNARY(atan)
OPS_STD_LITE_UNARY(sinh)
OPS_STD_LITE_UNARY(cosh)
OPS_STD_LITE_UNARY(tanh)
OPS_STD_LITE_UNARY(asinh)
OPS_STD_LITE_UNARY(acosh)
OPS_STD_LITE_UNARY(atanh)
OPS_STD_LITE_UNARY(floor)
OPS_STD_LITE_UNARY(ceil)
OPS_STD_LITE_UNARY(round)
OPS_STD_LITE_UNARY(trunc)
OPS_STD_LITE_BINARY(pow)
OPS_STD_LITE_BINARY(fmin)
OPS_STD_LITE_BINARY(fmax)
OPS_STD_LITE_BINARY(fmod)
OPS_STD_LITE_BINARY(atan2)
OPS_STD_LITE_BINARY(hypot)
OPS_STD_LITE_BINARY(copysign)
#undef OPS_STD_LITE_UNARY
#undef OPS_STD_LITE_BINARY
__device__ inline float abs(float x) { return ::fabsf(x); }
__device__ inline double abs(double x) { return ::fabs(x); }
__device__ inline int abs(int x) { return x < 0 ? -x : x; }
__device__ inline long long abs(long long x) { return x < 0 ? -x : x; }
__device__ inline long abs(long x) { return x < 0 ? -x : x; }
__device__ inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ inline double fma(double a, double b, double c) { return ::fma(a, b, c); }
// pow of mixed types (a float and an int exponent, say) is computed in double, as <cmath>
// does on the host.
template <typename A, typename B>
__device__ inline double pow(A a, B b) { return ::pow(double(a), double(b)); }
__device__ inline bool isnan(float x) { return ::isnan(x); }
__device__ inline bool isnan(double x) { return ::isnan(x); }
__device__ inline bool isinf(float x) { return ::isinf(x); }
__device__ inline bool isinf(double x) { return ::isinf(x); }
__device__ inline bool isfinite(float x) { return ::isfinite(x); }
__device__ inline bool isfinite(double x) { return ::isfinite(x); }
// <algorithm>'s min and max (the smaller, or the first when neither is).
template <typename T>
__device__ constexpr const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <typename T>
__device__ constexpr const T& max(const T& a, const T& b) { return a < b ? b : a; }
}  // namespace std
#else
// <algorithm> stays out (every nvcc phase of every .cu edit would parse it again): std::min
// and std::max come with libstdc++'s <cmath>, and tests/test_nvrtc.py compiles them here.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#endif

#include "common/host_device.h"

namespace ops_common {

// 1 / sqrt(x): CUDA's one-instruction rsqrt on the device (within 2 ulp for float), the
// quotient on the host. No standard name exists for it.
OPS_HOST_DEVICE float rsqrt(float x) {
#if defined(__CUDA_ARCH__)
  return ::rsqrtf(x);
#else
  return 1.0f / std::sqrt(x);
#endif
}

OPS_HOST_DEVICE double rsqrt(double x) {
#if defined(__CUDA_ARCH__)
  return ::rsqrt(x);
#else
  return 1.0 / std::sqrt(x);
#endif
}

}  // namespace ops_common
