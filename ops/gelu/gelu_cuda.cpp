// gelu: CUDA host side (checks, device guard, stream, dtype dispatch) around the
// launchers compiled in gelu_cuda.cu.
#include "common/host_glue.h"  // first: the unit compiles at -O1 (see there)

#include <torch/csrc/stable/library.h>

#include "common/pointwise_cuda.h"
#include "gelu_types.h"

STABLE_TORCH_LIBRARY_IMPL(gelu, CUDA, m) {
  m.impl("forward", TORCH_BOX(&ops_common::pointwise_forward_cuda<gelu_op::Forward>));
  m.impl("backward", TORCH_BOX(&ops_common::pointwise_backward_cuda<gelu_op::Backward>));
}
