#pragma once
// Sigmoid and the sigmoid-approximated GELU, x * sigmoid(1.702 x), with their
// derivatives: the one copy of the math that the CPU and CUDA kernels both compile.
//
// exp is only ever taken of -|x| <= 0, so it cannot overflow for any input (e^x of a
// large x is inf, and inf / inf a NaN). Two primitives differ by backend, each for
// speed: on the host a branch-free polynomial exp that GCC vectorises (a loop calling
// expf is not vectorised), on the device the hardware exp2 and reciprocal units (the
// kernels must stay memory-bound even for 16-bit data on an H200).
#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ops_common {

constexpr double kGeluAlpha = 1.702;

C10_HOST_DEVICE inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

C10_HOST_DEVICE inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// exp(x) for x <= 0 within 2 ulp, subnormal results included. The device has CUDA's
// expf, or with kFast the hardware exp2 alone (see kFastMath). The host has a
// Cody-Waite reduction x = n ln2 + r with |r| <= ln2 / 2 (n rounded by adding
// 1.5 * 2^23, which needs no rounding instruction), Cephes' polynomial for e^r, and 2^n
// applied in two halves because 2^n alone is not a normal float below n = -126. Below
// -104 (where the result rounds to 0, and -inf would give NaN) the result is masked to
// 0 rather than the input clamped: GCC turns a clamp to a constant into a branch and
// then refuses to vectorise the loop.
template <bool kFast = false>
C10_HOST_DEVICE inline float exp_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
  if constexpr (kFast) {
    return __expf(x);
  }
  return expf(x);
#else
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
  p = p * (r * r) + r + 1.0f;
  const int32_t half = n >> 1;
  const float e = p * bits_to_float(static_cast<uint32_t>(half + 127) << 23) *
                  bits_to_float(static_cast<uint32_t>(n - half + 127) << 23);
  const uint32_t keep = 0u - static_cast<uint32_t>(!(x < -104.0f));
  return bits_to_float(float_to_bits(e) & keep);
#endif
}

template <bool kFast = false>
C10_HOST_DEVICE inline double exp_nonpositive(double x) {
  return std::exp(x);
}

// a / b for b in [1, 2]: within 2 ulp from the reciprocal unit on the device.
C10_HOST_DEVICE inline float divide_by_1_to_2(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}

C10_HOST_DEVICE inline double divide_by_1_to_2(double a, double b) {
  return a / b;
}

// 16-bit data is computed in float and rounded to 8 (bfloat16) or 11 (half) significant
// bits, so on the device its exp may be the bare hardware exp2 of x log2(e) (__expf): for
// x in [-87, 0] its relative error stays under 6e-6, far below one 16-bit ulp (2^-11 =
// 4.9e-4 for half), and it halves the instructions per element, which a bfloat16 kernel
// needs to stay memory-bound (8 elements per 16-byte load). Below -87 the result is
// under float's normal range (1.2e-38) and flushes to 0. float and double keep the
// accurate exp.
template <typename T>
constexpr bool kFastMath = sizeof(T) < sizeof(at::opmath_type<T>);

// sigmoid(x) = 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) for x < 0: one exp of
// -|x|, and both halves keep full relative precision.
template <bool kFast = false, typename T>
C10_HOST_DEVICE inline T sigmoid(T x) {
  const T e = exp_nonpositive<kFast>(-std::abs(x));
  return divide_by_1_to_2(x < T(0) ? e : T(1), T(1) + e);
}

template <typename T>
C10_HOST_DEVICE inline T sigmoid_backward(T grad, T y) {
  return grad * ((T(1) - y) * y);
}

template <bool kFast = false, typename T>
C10_HOST_DEVICE inline T gelu_forward(T x) {
  return x * sigmoid<kFast>(T(kGeluAlpha) * x);
}

// d/dx [x s(a x)] = s + a x s (1 - s). x s is formed first: it is 0 where a x
// overflows to -inf (s = 0), and stays finite where 1 - s = 0, so no inf * 0.
template <bool kFast = false, typename T>
C10_HOST_DEVICE inline T gelu_backward(T grad, T x) {
  const T s = sigmoid<kFast>(T(kGeluAlpha) * x);
  return grad * (s + T(kGeluAlpha) * ((x * s) * (T(1) - s)));
}

// Elementwise functors for the kernels: 16-bit inputs are computed in float (kFastMath).
struct SigmoidForward {
  template <typename T>
  C10_HOST_DEVICE T operator()(T x) const {
    using acc_t = at::opmath_type<T>;
    return static_cast<T>(sigmoid<kFastMath<T>>(static_cast<acc_t>(x)));
  }
};

struct SigmoidBackward {
  template <typename T>
  C10_HOST_DEVICE T operator()(T grad, T y) const {
    using acc_t = at::opmath_type<T>;
    return static_cast<T>(sigmoid_backward(static_cast<acc_t>(grad), static_cast<acc_t>(y)));
  }
};

struct GeluForward {
  template <typename T>
  C10_HOST_DEVICE T operator()(T x) const {
    using acc_t = at::opmath_type<T>;
    return static_cast<T>(gelu_forward<kFastMath<T>>(static_cast<acc_t>(x)));
  }
};

struct GeluBackward {
  template <typename T>
  C10_HOST_DEVICE T operator()(T grad, T x) const {
    using acc_t = at::opmath_type<T>;
    return static_cast<T>(
        gelu_backward<kFastMath<T>>(static_cast<acc_t>(grad), static_cast<acc_t>(x)));
  }
};

}  // namespace ops_common
