// gelu, the sigmoid approximation x * sigmoid(1.702 x): schema and CPU host side (checks,
// layout, dtype dispatch; common/pointwise.h). The math is in gelu.h; the CPU loops over it
// are compiled in gelu_cpu.cpp.
// Host glue only (checks, dtype dispatch, registration): GCC's -O1 compiles it in about
// three quarters of -O3's time, on the critical path of every edit of this file, and a call
// costs the same (experiments/RESULTS.md, cpp-edit). Clang does not know the pragma.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O1")
#endif
#include <torch/csrc/stable/library.h>

#include "common/pointwise.h"
#include "gelu.h"

STABLE_TORCH_LIBRARY(gelu, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(gelu, CPU, m) {
  m.impl("forward", TORCH_BOX(&ops_common::pointwise_forward_cpu<gelu_op::Forward>));
  m.impl("backward", TORCH_BOX(&ops_common::pointwise_backward_cpu<gelu_op::Backward>));
}
