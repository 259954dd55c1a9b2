#pragma once
// Scalar math shared by the CPU loops and the CUDA kernels of every op: bit casts,
// branch-free selects, exp and expm1 of x <= 0, sigmoid, ELU and tanh. Torch-free, so a
// torch-free .cu can include it.
//
// Each function has one formula per backend, chosen for speed. On the host: a
// branch-free polynomial exp that GCC vectorises (a loop calling expf is vectorised only
// under -ffast-math, and GCC does not if-convert float branches under the default
// -ftrapping-math, so every select is an integer mask on the bits). On the device:
// CUDA's expf/expm1/tanh, or with kFast the hardware exp2 and reciprocal units; kFast
// (16-bit data only) also shortens the host exp.
// exp is only ever taken of -|x| <= 0, so it cannot overflow for any input.
#include <cstdint>

#include "common/host_device.h"
#include "common/std_lite.h"  // <cmath>, <cstring>, <type_traits>

namespace ops_common {

OPS_HOST_DEVICE float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

OPS_HOST_DEVICE uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// All ones where condition holds, else zero: the operand of the selects below.
OPS_HOST_DEVICE uint32_t mask_if(bool condition) {
  return 0u - static_cast<uint32_t>(condition);
}

OPS_HOST_DEVICE uint32_t select(uint32_t mask, uint32_t if_true, uint32_t if_false) {
  return (if_true & mask) | (if_false & ~mask);
}

OPS_HOST_DEVICE float select(uint32_t mask, float if_true, float if_false) {
  return bits_to_float(select(mask, float_to_bits(if_true), float_to_bits(if_false)));
}

// All ones where x has its sign bit set (-0 and negative NaNs included).
OPS_HOST_DEVICE uint32_t negative_mask(float x) {
  return mask_if((float_to_bits(x) >> 31) != 0);
}

struct ExpExpm1 {
  float exp, expm1;
};

// exp(x) and exp(x) - 1 for x <= 0 on the host, within 2 ulp, subnormal results
// included; NaN propagates. Cody-Waite reduction x = n ln2 + r with |r| <= ln2 / 2 (n
// rounded by adding 1.5 * 2^23, which needs no rounding instruction), Cephes' degree-7
// polynomial q(r) = e^r - 1, which keeps expm1 exact near 0 where exp(x) - 1 cancels, and
// 2^n applied in two halves because 2^n alone is not a normal float below n = -126.
// Below -104 (where exp rounds to 0, and -inf would give NaN) the results are masked to
// 0 and -1 rather than the input clamped: GCC turns a clamp to a constant into a branch
// and then refuses to vectorise the loop.
inline ExpExpm1 exp_expm1_nonpositive_host(float x) {
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const int32_t n = static_cast<int32_t>(float_to_bits(t) - float_to_bits(kRound));
  const float nf = t - kRound;
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float q = p * (r * r) + r;
  const int32_t half = n >> 1;
  const float scale_a = bits_to_float(static_cast<uint32_t>(half + 127) << 23);
  const float scale_b = bits_to_float(static_cast<uint32_t>(n - half + 127) << 23);
  const float scale = scale_a * scale_b;
  const uint32_t keep = mask_if(!(x < -104.0f));
  ExpExpm1 out;
  out.exp = bits_to_float(float_to_bits((q + 1.0f) * scale_a * scale_b) & keep);
  out.expm1 = select(keep, q * scale + (scale - 1.0f), -1.0f);
  return out;
}

// exp(x) for x <= 0 on the host, within 4e-6 relative for x >= -87 and 0 below (the
// kFast exp: see kFastMath). The same reduction as above with one scaling (2^n is a
// normal float for n >= -126) and a degree-4 polynomial fitted to e^r on
// [-ln2 / 2, ln2 / 2] for least relative error (2.7e-6): about half the instructions.
inline float exp_nonpositive_fast_host(float x) {
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const uint32_t n = float_to_bits(t) - float_to_bits(kRound);
  const float nf = t - kRound;
  const float r = (x - nf * 0.693359375f) - nf * -2.12194440e-4f;
  float p = 0.0414586067f;
  p = p * r + 0.167909071f;
  p = p * r + 0.500043571f;
  p = p * r + 0.999963403f;
  p = p * r + 0.999999285f;
  const float scale = bits_to_float((n + 127u) << 23);
  return bits_to_float(float_to_bits(p * scale) & mask_if(!(x < -87.0f)));
}

// exp(x) for x <= 0. kFast takes the hardware exp2 of x log2(e) (__expf) on the device
// and the short polynomial above on the host; see kFastMath for when that is accurate
// enough.
template <bool kFast = false>
OPS_HOST_DEVICE float exp_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
  if constexpr (kFast) {
    return __expf(x);
  }
  return expf(x);
#else
  if constexpr (kFast) {
    return exp_nonpositive_fast_host(x);
  }
  return exp_expm1_nonpositive_host(x).exp;
#endif
}

template <bool kFast = false>
OPS_HOST_DEVICE double exp_nonpositive(double x) {
  return std::exp(x);
}

// exp(x) - 1 for x <= 0.
OPS_HOST_DEVICE float expm1_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
  return expm1f(x);
#else
  return exp_expm1_nonpositive_host(x).expm1;
#endif
}

OPS_HOST_DEVICE double expm1_nonpositive(double x) {
  return std::expm1(x);
}

// a / b for b in [1, 2]: within 2 ulp from the reciprocal unit on the device.
OPS_HOST_DEVICE float divide_by_1_to_2(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}

OPS_HOST_DEVICE double divide_by_1_to_2(double a, double b) {
  return a / b;
}

// 16-bit data is computed in float and rounded to 8 (bfloat16) or 11 (half) significant
// bits, so its exp may be a fast one: on the device the bare hardware exp2 of x log2(e)
// (__expf), on the host exp_nonpositive_fast_host. For x in [-87, 0] their relative
// errors stay under 6e-6, far below one 16-bit ulp (2^-11 = 4.9e-4 for half), and they
// halve the instructions per element, which 16-bit data needs to stay memory-bound (on a
// GPU, 8 elements per 16-byte load; on a CPU, twice the elements per byte of float).
// Below -87 the result is under float's normal range (1.2e-38) and flushes to 0. float
// and double keep the accurate exp. Storage is the type in memory, Compute the type the
// math runs in.
template <typename Storage, typename Compute>
constexpr bool kFastMath = sizeof(Storage) < sizeof(Compute);

// sigmoid(x) = 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) for x < 0: one exp of
// -|x|, and both halves keep full relative precision.
template <bool kFast = false, typename T>
OPS_HOST_DEVICE T sigmoid(T x) {
  const T e = exp_nonpositive<kFast>(-std::abs(x));
  return divide_by_1_to_2(x < T(0) ? e : T(1), T(1) + e);
}

// ELU with alpha 1: x for x > 0, e^x - 1 otherwise.
template <typename T>
OPS_HOST_DEVICE T elu(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    const uint32_t negative = negative_mask(x);
    return select(negative, expm1_nonpositive(select(negative, x, 0.0f)), x);
  }
#endif
  return x > T(0) ? x : expm1_nonpositive(x);
}

// tanh(x) = sign(x) |m| / (2 + m) with m = e^-2|x| - 1, exact near 0 through expm1.
template <typename T>
OPS_HOST_DEVICE T tanh(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    const float m = expm1_nonpositive(-2.0f * std::fabs(x));
    return bits_to_float(float_to_bits(std::fabs(m) / (2.0f + m)) |
                         (float_to_bits(x) & 0x80000000u));
  }
#endif
  return std::tanh(x);
}

}  // namespace ops_common
