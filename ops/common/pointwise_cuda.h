#pragma once
// CUDA host side of the elementwise ops (an op's *_cuda.cpp): the checks and layout of
// common/pointwise.h, device guard, current stream and dtype dispatch around the
// torch-free launchers that the op's .cu instantiates (common/pointwise_launch.h).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include "common/cuda_host.h"
#include "common/pointwise.h"
#include "common/pointwise_launch.h"

namespace ops_common {

template <typename Op>
at::Tensor pointwise_forward_cuda(const at::Tensor& x) {
  check_pointwise_input(Op::kName, "x", x);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor y = empty_contiguous_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), Op::kName, [&] {
    OPS_CHECK_LAUNCH(launch_pointwise<Op>(current_stream(), xc.numel(), cuda_ptr<scalar_t>(y),
                                          cuda_ptr<scalar_t>(xc)));
  });
  return y;
}

template <typename Op>
at::Tensor pointwise_backward_cuda(const at::Tensor& grad, const at::Tensor& saved) {
  check_pointwise_grad(Op::kName, grad, Op::kSavedName, saved);
  const c10::cuda::CUDAGuard guard(saved.device());
  const at::Tensor gc = grad.contiguous();
  const at::Tensor sc = saved.contiguous();
  at::Tensor dx = empty_contiguous_like(sc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, sc.scalar_type(), Op::kName, [&] {
    OPS_CHECK_LAUNCH(launch_pointwise<Op>(current_stream(), sc.numel(), cuda_ptr<scalar_t>(dx),
                                          cuda_ptr<scalar_t>(gc), cuda_ptr<scalar_t>(sc)));
  });
  return dx;
}

}  // namespace ops_common
