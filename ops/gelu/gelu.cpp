// gelu, the sigmoid approximation x * sigmoid(1.702 x): schema and CPU host side (checks,
// layout, dtype dispatch; common/pointwise.h). The math is in gelu.h, compiled in the CPU
// loops of gelu_cpu.cpp; this unit sees only the tag types (gelu_types.h).
#include "common/host_glue.h"  // first: the unit compiles at -O1 (see there)

#include <torch/csrc/stable/library.h>

#include "common/pointwise.h"
#include "gelu_types.h"

STABLE_TORCH_LIBRARY(gelu, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(gelu, CPU, m) {
  m.impl("forward", TORCH_BOX(&ops_common::pointwise_forward_cpu<gelu_op::Forward>));
  m.impl("backward", TORCH_BOX(&ops_common::pointwise_backward_cpu<gelu_op::Backward>));
}
