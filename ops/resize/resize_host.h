#pragma once
// Host side shared by the CPU (resize.cpp) and CUDA (resize_cuda.cpp) backends, on the
// stable ABI: argument checks that name the argument and show the bad value, and the plan
// a kernel runs from (sizes, coordinate mode, scale factors, memory format). Declared
// here, compiled once in resize_host.cpp.
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "common/stable_checks.h"
#include "common/stable_ops.h"
#include "resize_types.h"

namespace resize_op {

using torch::stable::Tensor;
using ops_common::MemoryFormat;

CoordinateMode parse_mode(const char* op, const std::string& mode);

struct Plan {
  Geometry geometry;
  CoordinateMode mode;
  double scale_h;  // F.interpolate's scale factor per axis, <= 0 when none was given
  double scale_w;
  MemoryFormat format;
  int64_t n, c;
};

void check_spatial(const char* op, const char* name, int64_t h, int64_t w);

Plan make_plan(const char* op, const Tensor& big_side, const char* big_name,
               const std::vector<int64_t>& in_size, int64_t out_h, int64_t out_w,
               const std::string& coordinate_mode,
               const std::optional<std::vector<double>>& scale_factors);

Plan forward_plan(const char* op, const Tensor& input, const std::vector<int64_t>& output_size,
                  const std::string& coordinate_mode,
                  const std::optional<std::vector<double>>& scale_factors);

Plan backward_plan(const char* op, const Tensor& grad_output,
                   const std::vector<int64_t>& input_size, const std::string& coordinate_mode,
                   const std::optional<std::vector<double>>& scale_factors);

template <typename acc_t>
AxisMap<acc_t> height_map(const Plan& plan) {
  return make_axis_map<acc_t>(plan.geometry.in_h, plan.geometry.out_h, plan.mode, plan.scale_h);
}

template <typename acc_t>
AxisMap<acc_t> width_map(const Plan& plan) {
  return make_axis_map<acc_t>(plan.geometry.in_w, plan.geometry.out_w, plan.mode, plan.scale_w);
}

// The output of either pass: the given sizes in the plan's memory format (the suggested
// format of the tensor the pass reads, as the fake kernels compute it).
Tensor empty_result(const Plan& plan, const std::vector<int64_t>& sizes, const Tensor& like);

}  // namespace resize_op
