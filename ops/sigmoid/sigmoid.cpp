// sigmoid: schema and CPU host side (checks, layout, dtype dispatch; common/pointwise.h).
// The math is in sigmoid.h, compiled in the CPU loops of sigmoid_cpu.cpp; this unit sees
// only the tag types (sigmoid_types.h).
#include "common/host_glue.h"  // first: the unit compiles at -O1 (see there)

#include <torch/csrc/stable/library.h>

#include "common/pointwise.h"
#include "sigmoid_types.h"

STABLE_TORCH_LIBRARY(sigmoid, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor y) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(sigmoid, CPU, m) {
  m.impl("forward", TORCH_BOX(&ops_common::pointwise_forward_cpu<sigmoid_op::Forward>));
  m.impl("backward", TORCH_BOX(&ops_common::pointwise_backward_cpu<sigmoid_op::Backward>));
}
