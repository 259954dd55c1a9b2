// sigmoid: schema and CPU host side (checks, layout, dtype dispatch; common/pointwise.h).
// The math is in sigmoid.h; the CPU loops over it are compiled in sigmoid_cpu.cpp.
// Host glue only (checks, dtype dispatch, registration): GCC's -O1 compiles it in about
// three quarters of -O3's time, on the critical path of every edit of this file, and a call
// costs the same (experiments/RESULTS.md, cpp-edit). Clang does not know the pragma.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O1")
#endif
#include <torch/csrc/stable/library.h>

#include "common/pointwise.h"
#include "sigmoid.h"

STABLE_TORCH_LIBRARY(sigmoid, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor y) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(sigmoid, CPU, m) {
  m.impl("forward", TORCH_BOX(&ops_common::pointwise_forward_cpu<sigmoid_op::Forward>));
  m.impl("backward", TORCH_BOX(&ops_common::pointwise_backward_cpu<sigmoid_op::Backward>));
}
