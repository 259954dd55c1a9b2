// sigmoid: CUDA host side (checks, device guard, stream, dtype dispatch) around the
// launchers compiled in sigmoid_cuda.cu.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/pointwise_cuda.h"
#include "sigmoid.h"

TORCH_LIBRARY_IMPL(sigmoid, CUDA, m) {
  m.impl("forward", &ops_common::pointwise_forward_cuda<sigmoid_op::Forward>);
  m.impl("backward", &ops_common::pointwise_backward_cuda<sigmoid_op::Backward>);
}
