// resize: schema and CPU host side (plans and checks of resize_host.h, dtype dispatch) of
// the bilinear resize with a selectable coordinate mode, on the stable ABI (its autograd is
// in resize.py). The CPU kernels are compiled in resize_cpu.cpp.
#include "common/host_glue.h"  // first: the unit compiles at -O1 (see there)

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <string>
#include <vector>

#include "resize_cpu.h"
#include "resize_host.h"

namespace {

using namespace resize_op;

Tensor resize_forward_cpu(const Tensor& input, std::vector<int64_t> output_size,
                          std::string coordinate_mode, std::optional<std::vector<double>> scale_factors) {
  const Plan plan = forward_plan("resize.forward", input, output_size, coordinate_mode, scale_factors);
  Tensor out = empty_result(plan, {plan.n, plan.c, output_size[0], output_size[1]}, input);
  if (out.numel() == 0) return out;
  const Tensor in = ops_common::contiguous(input, plan.format);
  OPS_DISPATCH_FLOATING(in.scalar_type(), "resize_forward_cpu", [&] {
    using acc = ops_common::opmath_t<scalar_t>;
    forward_cpu(in.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), plan.geometry,
                height_map<acc>(plan), width_map<acc>(plan));
  });
  return out;
}

Tensor resize_backward_cpu(const Tensor& grad_output, std::vector<int64_t> input_size,
                           std::string coordinate_mode, std::optional<std::vector<double>> scale_factors) {
  const Plan plan = backward_plan("resize.backward", grad_output, input_size, coordinate_mode,
                                  scale_factors);
  Tensor grad_in = empty_result(plan, input_size, grad_output);
  if (grad_in.numel() == 0) return grad_in;
  const Tensor g = ops_common::contiguous(grad_output, plan.format);
  OPS_DISPATCH_FLOATING(g.scalar_type(), "resize_backward_cpu", [&] {
    using acc = ops_common::opmath_t<scalar_t>;
    backward_cpu(g.const_data_ptr<scalar_t>(), grad_in.mutable_data_ptr<scalar_t>(), plan.geometry,
                 height_map<acc>(plan), width_map<acc>(plan));
  });
  return grad_in;
}

}  // namespace

STABLE_TORCH_LIBRARY(resize, m) {
  m.def("forward(Tensor input, SymInt[2] output_size, str coordinate_mode, float[]? scale_factors) -> Tensor");
  m.def("backward(Tensor grad_output, SymInt[4] input_size, str coordinate_mode, float[]? scale_factors) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(resize, CPU, m) {
  m.impl("forward", TORCH_BOX(&resize_forward_cpu));
  m.impl("backward", TORCH_BOX(&resize_backward_cpu));
}
