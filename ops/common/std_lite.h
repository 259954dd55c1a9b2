#pragma once
// The few standard-library names the shared device headers use: std::is_same_v,
// std::index_sequence, std::memcpy, std::exp, std::expm1, std::tanh, std::abs, std::fabs.
// On the host and under nvcc they come from the standard headers. Under NVRTC, which ships
// no standard library, they come from libcu++'s per-facility headers: its umbrella headers
// (<cuda/std/type_traits>, <cuda/std/utility>, <cuda/std/cmath>, what jit_tools/
// nvrtc_include maps <type_traits>, <utility> and <cmath> to) take NVRTC several times as
// long to parse as the kernels and swell its precompiled header, most of a kernel edit's
// compile; the per-facility headers of the type traits take a fraction of that, and the
// math comes from CUDA's math functions (figures: experiments/RESULTS.md, section
// kernel-edit-loop). A libcu++ without these headers gets the umbrella ones.
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
__device__ inline float abs(float x) { return ::fabsf(x); }
__device__ inline double abs(double x) { return ::fabs(x); }
__device__ inline float fabs(float x) { return ::fabsf(x); }
__device__ inline double fabs(double x) { return ::fabs(x); }
__device__ inline float exp(float x) { return ::expf(x); }
__device__ inline double exp(double x) { return ::exp(x); }
__device__ inline float expm1(float x) { return ::expm1f(x); }
__device__ inline double expm1(double x) { return ::expm1(x); }
__device__ inline float tanh(float x) { return ::tanhf(x); }
__device__ inline double tanh(double x) { return ::tanh(x); }
}  // namespace std
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#endif
