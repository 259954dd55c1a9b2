#pragma once
// The LLTM cell, shared by both backends so they cannot drift: the elementwise math
// (host and device), and the host composition (argument checks, GEMMs, buffers) that
// lltm.cpp implements once and lltm_cuda.cu reuses with its own pointwise stage.
//
// Gate layout along the 3 * state feature axis: [input gate | output gate | candidate].
// The forward pass keeps the activated gates; every derivative below is written in
// terms of activations (sigmoid' = s (1 - s), elu' = c + 1 for c <= 0, tanh' = 1 - t^2),
// so backward needs no pre-activations and recomputes only tanh(new_cell).
#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

namespace lltm {

#ifndef __CUDA_ARCH__
// Host float twins of the activations, for the CPU loop. They avoid calls (libm's expf is
// vectorised only under -ffast-math) and floating-point branches (GCC does not if-convert
// them under the default -ftrapping-math): selects are integer masks on the bits, so the
// loop auto-vectorises. Accuracy is that of libm within a few ulp, NaN propagates.
namespace host_float {

inline int32_t bits(float x) {
  int32_t i;
  std::memcpy(&i, &x, sizeof(i));
  return i;
}

inline float from_bits(int32_t i) {
  float x;
  std::memcpy(&x, &i, sizeof(x));
  return x;
}

// mask is all ones (take a) or all zeros (take b).
inline float select(int32_t mask, float a, float b) {
  return from_bits((bits(a) & mask) | (bits(b) & ~mask));
}

inline int32_t negative_mask(float x) {
  return bits(x) >> 31;
}

struct Exp {
  float exp, expm1;
};

// exp(x) and exp(x) - 1 for x <= 0: Cephes' range reduction x = n ln2 + r and degree-7
// polynomial for exp(r) - 1, which keeps expm1 exact near 0 where exp(x) - 1 cancels.
inline Exp exp_nonpositive(float x) {
  const int32_t magnitude = bits(x) & 0x7fffffff;
  const int32_t underflow = -static_cast<int32_t>(magnitude > 0x42ae0000);  // |x| > 87
  const int32_t nan = -static_cast<int32_t>(magnitude > 0x7f800000);
  const float xc = select(underflow, -87.0f, x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504f + kRound) - kRound;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float q = p * r * r + r;
  const float scale = from_bits((static_cast<int32_t>(n) + 127) << 23);
  Exp out;
  out.exp = select(nan, x, select(underflow, 0.0f, scale * q + scale));
  out.expm1 = select(nan, x, select(underflow, -1.0f, scale * q + (scale - 1.0f)));
  return out;
}

inline float sigmoid(float z) {
  const float e = exp_nonpositive(-std::fabs(z)).exp;
  const float s = 1.0f / (1.0f + e);
  return select(negative_mask(z), e * s, s);
}

inline float elu(float z) {
  const int32_t negative = negative_mask(z);
  return select(negative, exp_nonpositive(select(negative, z, 0.0f)).expm1, z);
}

inline float tanh(float x) {
  const float m = exp_nonpositive(-2.0f * std::fabs(x)).expm1;
  return from_bits(bits(std::fabs(m) / (2.0f + m)) | (bits(x) & INT32_MIN));
}

inline float d_elu(float c) {
  return select(negative_mask(c), c + 1.0f, 1.0f);
}

}  // namespace host_float
#endif

template <typename T>
C10_HOST_DEVICE inline T sigmoid(T z) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return host_float::sigmoid(z);
#endif
  return T(1) / (T(1) + std::exp(-z));
}

template <typename T>
C10_HOST_DEVICE inline T elu(T z) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return host_float::elu(z);
#endif
  return z > T(0) ? z : std::expm1(z);
}

template <typename T>
C10_HOST_DEVICE inline T tanh(T x) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return host_float::tanh(x);
#endif
  return std::tanh(x);
}

template <typename T>
C10_HOST_DEVICE inline T d_sigmoid(T s) {
  return s * (T(1) - s);
}

template <typename T>
C10_HOST_DEVICE inline T d_elu(T c) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return host_float::d_elu(c);
#endif
  return c > T(0) ? T(1) : c + T(1);
}

template <typename T>
C10_HOST_DEVICE inline T d_tanh(T t) {
  return T(1) - t * t;
}

template <typename T>
struct CellForward {
  T input_gate, output_gate, candidate, new_cell, new_h;
};

template <typename T>
C10_HOST_DEVICE inline CellForward<T> cell_forward(T z_input, T z_output, T z_candidate,
                                                   T old_cell) {
  CellForward<T> out;
  out.input_gate = sigmoid(z_input);
  out.output_gate = sigmoid(z_output);
  out.candidate = elu(z_candidate);
  out.new_cell = old_cell + out.candidate * out.input_gate;
  out.new_h = tanh(out.new_cell) * out.output_gate;
  return out;
}

template <typename T>
struct CellBackward {
  T d_input, d_output, d_candidate, d_old_cell;  // d_* of the pre-activations, d_old_cell
};

template <typename T>
C10_HOST_DEVICE inline CellBackward<T> cell_backward(T input_gate, T output_gate, T candidate,
                                                     T new_cell, T grad_h, T grad_cell) {
  const T t = tanh(new_cell);
  const T d_new_cell = d_tanh(t) * output_gate * grad_h + grad_cell;
  CellBackward<T> out;
  out.d_input = candidate * d_new_cell * d_sigmoid(input_gate);
  out.d_output = t * grad_h * d_sigmoid(output_gate);
  out.d_candidate = input_gate * d_new_cell * d_elu(candidate);
  out.d_old_cell = d_new_cell;
  return out;
}

// Host composition (lltm.cpp). Each backend supplies only its pointwise stages:
// forward: gates holds hx @ W^T on entry (bias not yet added) and the activated gates
// on exit; backward: writes d_gates and d_old_cell and returns d_bias (3 * state).
using ForwardPointwise = void (*)(const at::Tensor& gates, const at::Tensor& bias,
                                  const at::Tensor& old_cell, const at::Tensor& new_h,
                                  const at::Tensor& new_cell);
using BackwardPointwise = at::Tensor (*)(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                         const at::Tensor& new_cell, const at::Tensor& gates,
                                         const at::Tensor& d_gates, const at::Tensor& d_old_cell);

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

struct ForwardShape {
  int64_t batch, features, state;
};

// Checks forward's arguments (each error names the argument and shows its value).
ForwardShape check_forward(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& old_h,
                           const at::Tensor& old_cell);

// On checked arguments: hx = cat(old_h, input), gates = hx @ W^T, then the pointwise
// stage. Returns new_h, new_cell, gates (activated), hx = [old_h, input].
ForwardResult compose_forward(
    ForwardPointwise pointwise, const ForwardShape& shape, const at::Tensor& input,
    const at::Tensor& weights, const at::Tensor& bias, const at::Tensor& old_h,
    const at::Tensor& old_cell);

// d_input, d_weights, d_bias, d_old_h, d_old_cell; those off in output_mask are undefined
// and their GEMMs are skipped.
BackwardResult backward(
    BackwardPointwise pointwise, const at::Tensor& grad_h, const at::Tensor& grad_cell,
    const at::Tensor& new_cell, const at::Tensor& gates, const at::Tensor& hx,
    const at::Tensor& weights, std::array<bool, 5> output_mask);

}  // namespace lltm
