#pragma once
// The CPU kernels of LLTM's pointwise stages (lltm_cpu.cpp), for the host composition in
// lltm.cpp: lltm_compose.h's ForwardPointwise and BackwardPointwise on CPU tensors of any
// floating dtype.
#include <ATen/core/Tensor.h>

namespace lltm {

void forward_cpu_pointwise(const at::Tensor& gates, const at::Tensor& bias,
                           const at::Tensor& old_cell, const at::Tensor& new_h,
                           const at::Tensor& new_cell);

at::Tensor backward_cpu_pointwise(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                  const at::Tensor& new_cell, const at::Tensor& gates,
                                  const at::Tensor& d_gates, const at::Tensor& d_old_cell);

}  // namespace lltm
