#pragma once
// CUDA host side of the elementwise ops (an op's *_cuda.cpp), on the stable ABI: the
// checks and layout of common/pointwise.h, device guard, current stream and dtype
// dispatch around the torch-free launchers that the op's .cu instantiates
// (common/pointwise_launch.h).
#include "common/pointwise.h"
#include "common/pointwise_launch.h"
#include "common/stable_cuda_host.h"

namespace ops_common {

template <typename Op>
Tensor pointwise_forward_cuda(const Tensor& x) {
  check_pointwise_input(Op::kName, "x", x);
  const ops_common::DeviceGuard guard(x.get_device_index());
  const Tensor xc = ops_common::contiguous(x);
  Tensor y = ops_common::empty_contiguous_like(xc);
  OPS_DISPATCH_FLOATING(xc.scalar_type(), Op::kName, [&] {
    OPS_CHECK_LAUNCH(launch_pointwise<Op>(current_stream(xc), xc.numel(), cuda_ptr<scalar_t>(y),
                                          cuda_ptr<scalar_t>(xc)));
  });
  return y;
}

template <typename Op>
Tensor pointwise_backward_cuda(const Tensor& grad, const Tensor& saved) {
  check_pointwise_grad(Op::kName, grad, Op::kSavedName, saved);
  const ops_common::DeviceGuard guard(saved.get_device_index());
  const Tensor gc = ops_common::contiguous(grad);
  const Tensor sc = ops_common::contiguous(saved);
  Tensor dx = ops_common::empty_contiguous_like(sc);
  OPS_DISPATCH_FLOATING(sc.scalar_type(), Op::kName, [&] {
    OPS_CHECK_LAUNCH(launch_pointwise<Op>(current_stream(sc), sc.numel(), cuda_ptr<scalar_t>(dx),
                                          cuda_ptr<scalar_t>(gc), cuda_ptr<scalar_t>(sc)));
  });
  return dx;
}

}  // namespace ops_common
