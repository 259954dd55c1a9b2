#pragma once
// sigmoid's math, for the CPU loop and the CUDA kernels alike (torch-free). The
// backward takes the saved output y, since sigmoid'(x) = (1 - y) y needs no second exp.
#include "common/host_device.h"
#include "common/scalar_math.h"

namespace sigmoid_op {

struct Forward {
  static constexpr const char* kName = "sigmoid.forward";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T x) {
    return ops_common::sigmoid<kFast>(x);
  }
};

struct Backward {
  static constexpr const char* kName = "sigmoid.backward";
  static constexpr const char* kSavedName = "y";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T grad, T y) {
    return grad * ((T(1) - y) * y);
  }
};

}  // namespace sigmoid_op
