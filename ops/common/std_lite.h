#pragma once
// The few standard-library names the shared device headers use: std::is_same_v,
// std::index_sequence, std::memcpy, std::exp, std::expm1, std::tanh, std::abs, std::fabs.
// On the host and under nvcc they come from the standard headers. Under NVRTC, which ships
// no standard library, they come from libcu++'s per-facility headers: its umbrella headers
// (<cuda/std/type_traits>, <cuda/std/utility>, <cuda/std/cmath>, what jit_tools/
// nvrtc_include maps <type_traits>, <utility> and <cmath> to) take NVRTC several times as
// long to parse as the kernels and swell its precompiled header, most of a kernel edit's
// compile; these take a fraction of that (figures: experiments/RESULTS.md, section
// kernel-edit-loop). A libcu++ without these headers gets the umbrella ones.
#if defined(__CUDACC_RTC__) && __has_include(<cuda/std/__type_traits/is_same.h>)
#include <cstdint>
#include <cuda/std/__cmath/abs.h>
#include <cuda/std/__cmath/exponential_functions.h>
#include <cuda/std/__cmath/hyperbolic_functions.h>
#include <cuda/std/__type_traits/is_same.h>
#include <cuda/std/__utility/integer_sequence.h>
#include <cuda/std/cstring>
namespace std {
using namespace ::cuda::std;
}
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#endif
