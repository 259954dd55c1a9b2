// sigmoid: schema and CPU kernels. The backward takes the saved output y, since
// sigmoid'(x) = (1 - y) y needs no second exp. Math in common/activations.h.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "common/activations.h"
#include "common/cpu_loops.h"
#include "common/pointwise.h"

namespace {

at::Tensor sigmoid_forward_cpu(const at::Tensor& x) {
  ops_common::check_pointwise_input("sigmoid.forward", "x", x);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = ops_common::empty_contiguous_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "sigmoid_forward_cpu", [&] {
    ops_common::parallel_map(ops_common::SigmoidForward{}, xc.numel(), y.data_ptr<scalar_t>(),
                             xc.const_data_ptr<scalar_t>());
  });
  return y;
}

at::Tensor sigmoid_backward_cpu(const at::Tensor& grad, const at::Tensor& y) {
  ops_common::check_pointwise_grad("sigmoid.backward", grad, "y", y);
  const at::Tensor gc = grad.contiguous();
  const at::Tensor yc = y.contiguous();
  at::Tensor dx = ops_common::empty_contiguous_like(yc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, yc.scalar_type(), "sigmoid_backward_cpu", [&] {
    ops_common::parallel_map(ops_common::SigmoidBackward{}, yc.numel(), dx.data_ptr<scalar_t>(),
                             gc.const_data_ptr<scalar_t>(), yc.const_data_ptr<scalar_t>());
  });
  return dx;
}

}  // namespace

TORCH_LIBRARY(sigmoid, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor y) -> Tensor");
}

TORCH_LIBRARY_IMPL(sigmoid, CPU, m) {
  m.impl("forward", &sigmoid_forward_cpu);
  m.impl("backward", &sigmoid_backward_cpu);
}
