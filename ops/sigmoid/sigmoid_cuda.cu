// sigmoid: CUDA kernels. Memory-bound: the vectorised launcher in
// common/vectorized.cuh does the memory traffic, common/activations.h the math.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/activations.h"
#include "common/pointwise.h"
#include "common/vectorized.cuh"

namespace {

at::Tensor sigmoid_forward_cuda(const at::Tensor& x) {
  ops_common::check_pointwise_input("sigmoid.forward", "x", x);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor y = ops_common::empty_contiguous_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "sigmoid_forward_cuda", [&] {
    ops_common::launch_elementwise(ops_common::SigmoidForward{}, xc.numel(), y.data_ptr<scalar_t>(),
                                   xc.const_data_ptr<scalar_t>());
  });
  return y;
}

at::Tensor sigmoid_backward_cuda(const at::Tensor& grad, const at::Tensor& y) {
  ops_common::check_pointwise_grad("sigmoid.backward", grad, "y", y);
  const c10::cuda::CUDAGuard guard(y.device());
  const at::Tensor gc = grad.contiguous();
  const at::Tensor yc = y.contiguous();
  at::Tensor dx = ops_common::empty_contiguous_like(yc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, yc.scalar_type(), "sigmoid_backward_cuda", [&] {
    ops_common::launch_elementwise(ops_common::SigmoidBackward{}, yc.numel(), dx.data_ptr<scalar_t>(),
                                   gc.const_data_ptr<scalar_t>(), yc.const_data_ptr<scalar_t>());
  });
  return dx;
}

}  // namespace

TORCH_LIBRARY_IMPL(sigmoid, CUDA, m) {
  m.impl("forward", &sigmoid_forward_cuda);
  m.impl("backward", &sigmoid_backward_cuda);
}
