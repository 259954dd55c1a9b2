#pragma once
// Argument checks and layout shared by the elementwise activation ops on every
// backend: inputs of any layout are made contiguous and outputs are contiguous with
// the input's shape, so the kernels only ever see flat buffers.
#include <ATen/ATen.h>

#include "common/checks.h"

namespace ops_common {

inline void check_pointwise_input(const char* op, const char* name, const at::Tensor& t) {
  OP_CHECK_FLOATING(op, name, t);
}

inline void check_pointwise_grad(const char* op, const at::Tensor& grad, const char* saved_name,
                                 const at::Tensor& saved) {
  OP_CHECK_FLOATING(op, saved_name, saved);
  OP_CHECK_SAME_DEVICE(op, "grad", grad, saved_name, saved);
  OP_CHECK_SAME_DTYPE(op, "grad", grad, saved_name, saved);
  TORCH_CHECK(grad.sizes() == saved.sizes(), op, ": grad has shape ", grad.sizes(), " but ",
              saved_name, " has shape ", saved.sizes());
}

inline at::Tensor empty_contiguous_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

}  // namespace ops_common
