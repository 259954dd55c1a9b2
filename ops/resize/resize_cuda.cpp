// resize: CUDA host side. Checks and plans are shared with the CPU backend
// (resize_host.h); the kernels are the torch-free launchers of resize_cuda.cu.
#include "common/host_glue.h"  // first: the unit compiles at -O1 (see there)

#include <torch/csrc/stable/library.h>

#include <string>
#include <vector>

#include "common/stable_cuda_host.h"
#include "resize_cuda.h"
#include "resize_host.h"

namespace {

using namespace resize_op;

Tensor resize_forward_cuda(const Tensor& input, std::vector<int64_t> output_size,
                           std::string coordinate_mode, std::optional<std::vector<double>> scale_factors) {
  const Plan plan = forward_plan("resize.forward", input, output_size, coordinate_mode, scale_factors);
  const ops_common::DeviceGuard guard(input.get_device_index());
  Tensor out = empty_result(plan, {plan.n, plan.c, output_size[0], output_size[1]}, input);
  if (out.numel() == 0) return out;
  const Tensor in = ops_common::contiguous(input, plan.format);
  OPS_DISPATCH_FLOATING(in.scalar_type(), "resize_forward_cuda", [&] {
    using acc = ops_common::opmath_t<scalar_t>;
    OPS_CHECK_LAUNCH(launch_forward(ops_common::cuda_ptr<scalar_t>(in), ops_common::cuda_ptr<scalar_t>(out),
                                    plan.geometry, height_map<acc>(plan), width_map<acc>(plan),
                                    ops_common::current_stream(in)));
  });
  return out;
}

Tensor resize_backward_cuda(const Tensor& grad_output, std::vector<int64_t> input_size,
                            std::string coordinate_mode, std::optional<std::vector<double>> scale_factors) {
  const Plan plan = backward_plan("resize.backward", grad_output, input_size, coordinate_mode,
                                  scale_factors);
  const ops_common::DeviceGuard guard(grad_output.get_device_index());
  Tensor grad_in = empty_result(plan, input_size, grad_output);
  if (grad_in.numel() == 0) return grad_in;
  const Tensor g = ops_common::contiguous(grad_output, plan.format);
  OPS_DISPATCH_FLOATING(g.scalar_type(), "resize_backward_cuda", [&] {
    using acc = ops_common::opmath_t<scalar_t>;
    OPS_CHECK_LAUNCH(launch_backward(ops_common::cuda_ptr<scalar_t>(g), ops_common::cuda_ptr<scalar_t>(grad_in),
                                     plan.geometry, height_map<acc>(plan), width_map<acc>(plan),
                                     ops_common::current_stream(g)));
  });
  return grad_in;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(resize, CUDA, m) {
  m.impl("forward", TORCH_BOX(&resize_forward_cuda));
  m.impl("backward", TORCH_BOX(&resize_backward_cuda));
}
