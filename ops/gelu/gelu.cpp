// gelu, the sigmoid approximation x * sigmoid(1.702 x): schema and CPU kernels.
// The backward takes the saved input x. Math in common/activations.h.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "common/activations.h"
#include "common/cpu_loops.h"
#include "common/pointwise.h"

namespace {

at::Tensor gelu_forward_cpu(const at::Tensor& x) {
  ops_common::check_pointwise_input("gelu.forward", "x", x);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = ops_common::empty_contiguous_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "gelu_forward_cpu", [&] {
    ops_common::parallel_map(ops_common::GeluForward{}, xc.numel(), y.data_ptr<scalar_t>(),
                             xc.const_data_ptr<scalar_t>());
  });
  return y;
}

at::Tensor gelu_backward_cpu(const at::Tensor& grad, const at::Tensor& x) {
  ops_common::check_pointwise_grad("gelu.backward", grad, "x", x);
  const at::Tensor gc = grad.contiguous();
  const at::Tensor xc = x.contiguous();
  at::Tensor dx = ops_common::empty_contiguous_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "gelu_backward_cpu", [&] {
    ops_common::parallel_map(ops_common::GeluBackward{}, xc.numel(), dx.data_ptr<scalar_t>(),
                             gc.const_data_ptr<scalar_t>(), xc.const_data_ptr<scalar_t>());
  });
  return dx;
}

}  // namespace

TORCH_LIBRARY(gelu, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(gelu, CPU, m) {
  m.impl("forward", &gelu_forward_cpu);
  m.impl("backward", &gelu_backward_cpu);
}
