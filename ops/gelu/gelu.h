#pragma once
// gelu's math, the sigmoid approximation x * sigmoid(1.702 x), for the CPU loops and the
// CUDA kernels alike (torch-free). Included by gelu_cpu.cpp and gelu_cuda.cu only; the
// host glue sees gelu_types.h.
#include "common/scalar_math.h"
#include "gelu_types.h"

namespace gelu_op {

// The one definition of the approximation's constant in C++ (the CPU and CUDA kernels
// both take it from here; Python's ALPHA is in gelu.py and reference.py).
constexpr double kAlpha = 1.702;

template <bool kFast, typename T>
OPS_HOST_DEVICE T Forward::apply(T x) {
  return x * ops_common::sigmoid<kFast>(T(kAlpha) * x);
}

// d/dx [x s(a x)] = s + a x s (1 - s). x s is formed first: it is 0 where a x
// overflows to -inf (s = 0), and stays finite where 1 - s = 0, so no inf * 0.
template <bool kFast, typename T>
OPS_HOST_DEVICE T Backward::apply(T grad, T x) {
  const T s = ops_common::sigmoid<kFast>(T(kAlpha) * x);
  return grad * (s + T(kAlpha) * ((x * s) * (T(1) - s)));
}

}  // namespace gelu_op
