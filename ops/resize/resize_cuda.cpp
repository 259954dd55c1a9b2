// resize: CUDA host side. Checks and plans are shared with the CPU backend
// (resize_host.h); the kernels are the torch-free launchers of resize_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <type_traits>

#include "common/cuda_host.h"
#include "resize_cuda.h"
#include "resize_host.h"

namespace {

using namespace resize_op;

template <typename scalar_t>
using acc_of = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

at::Tensor resize_forward_cuda(const at::Tensor& input, at::IntArrayRef output_size,
                               c10::string_view coordinate_mode,
                               std::optional<at::ArrayRef<double>> scale_factors) {
  const Plan plan = forward_plan("resize.forward", input, output_size, coordinate_mode, scale_factors);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = empty_result(plan, {plan.n, plan.c, output_size[0], output_size[1]}, input);
  if (out.numel() == 0) return out;
  const at::Tensor in = input.contiguous(plan.format);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "resize_forward_cuda", [&] {
    using acc = acc_of<scalar_t>;
    OPS_CHECK_LAUNCH(launch_forward(ops_common::cuda_ptr<scalar_t>(in), ops_common::cuda_ptr<scalar_t>(out),
                                    plan.geometry, height_map<acc>(plan), width_map<acc>(plan),
                                    ops_common::current_stream()));
  });
  return out;
}

at::Tensor resize_backward_cuda(const at::Tensor& grad_output, at::IntArrayRef input_size,
                                c10::string_view coordinate_mode,
                                std::optional<at::ArrayRef<double>> scale_factors) {
  const Plan plan = backward_plan("resize.backward", grad_output, input_size, coordinate_mode,
                                  scale_factors);
  const c10::cuda::CUDAGuard guard(grad_output.device());
  at::Tensor grad_in = empty_result(plan, input_size, grad_output);
  if (grad_in.numel() == 0) return grad_in;
  const at::Tensor g = grad_output.contiguous(plan.format);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "resize_backward_cuda", [&] {
    using acc = acc_of<scalar_t>;
    OPS_CHECK_LAUNCH(launch_backward(ops_common::cuda_ptr<scalar_t>(g), ops_common::cuda_ptr<scalar_t>(grad_in),
                                     plan.geometry, height_map<acc>(plan), width_map<acc>(plan),
                                     ops_common::current_stream()));
  });
  return grad_in;
}

}  // namespace

TORCH_LIBRARY_IMPL(resize, CUDA, m) {
  m.impl("forward", &resize_forward_cuda);
  m.impl("backward", &resize_backward_cuda);
}
