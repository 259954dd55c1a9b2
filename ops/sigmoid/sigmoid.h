#pragma once
// sigmoid's math, for the CPU loops and the CUDA kernels alike (torch-free). Included by
// sigmoid_cpu.cpp and sigmoid_cuda.cu only; the host glue sees sigmoid_types.h. The
// backward takes the saved output y, since sigmoid'(x) = (1 - y) y needs no second exp.
#include "common/scalar_math.h"
#include "sigmoid_types.h"

namespace sigmoid_op {

template <bool kFast, typename T>
OPS_HOST_DEVICE T Forward::apply(T x) {
  return ops_common::sigmoid<kFast>(x);
}

template <bool kFast, typename T>
OPS_HOST_DEVICE T Backward::apply(T grad, T y) {
  return grad * ((T(1) - y) * y);
}

}  // namespace sigmoid_op
