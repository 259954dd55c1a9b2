#pragma once
// gelu's math, the sigmoid approximation x * sigmoid(1.702 x), for the CPU loop and
// the CUDA kernels alike (torch-free). The backward takes the saved input x.
#include "common/host_device.h"
#include "common/scalar_math.h"

namespace gelu_op {

// The one definition of the approximation's constant in C++ (the CPU and CUDA kernels
// both take it from here; Python's ALPHA is in gelu.py and reference.py).
constexpr double kAlpha = 1.702;

struct Forward {
  static constexpr const char* kName = "gelu.forward";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T x) {
    return x * ops_common::sigmoid<kFast>(T(kAlpha) * x);
  }
};

// d/dx [x s(a x)] = s + a x s (1 - s). x s is formed first: it is 0 where a x
// overflows to -inf (s = 0), and stays finite where 1 - s = 0, so no inf * 0.
struct Backward {
  static constexpr const char* kName = "gelu.backward";
  static constexpr const char* kSavedName = "x";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T grad, T x) {
    const T s = ops_common::sigmoid<kFast>(T(kAlpha) * x);
    return grad * (s + T(kAlpha) * ((x * s) * (T(1) - s)));
  }
};

}  // namespace gelu_op
