#pragma once
// Host side shared by the CPU (resize.cpp) and CUDA (resize_cuda.cpp) backends: argument
// checks that name the argument and show the bad value, and the plan a kernel runs from
// (sizes, coordinate mode, scale factors, memory format).
#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "common/checks.h"
#include "resize.h"

namespace resize_op {

inline CoordinateMode parse_mode(const char* op, c10::string_view mode) {
  if (mode == "half_pixel") return CoordinateMode::kHalfPixel;
  if (mode == "align_corners") return CoordinateMode::kAlignCorners;
  if (mode == "asymmetric") return CoordinateMode::kAsymmetric;
  TORCH_CHECK(false, op, ": coordinate_mode must be one of 'half_pixel', 'align_corners', "
              "'asymmetric', got '", std::string(mode), "'");
}

struct Plan {
  Geometry geometry;
  CoordinateMode mode;
  double scale_h;  // F.interpolate's scale factor per axis, <= 0 when none was given
  double scale_w;
  at::MemoryFormat format;
  int64_t n, c;
};

inline void check_spatial(const char* op, const char* name, int64_t h, int64_t w) {
  TORCH_CHECK(h > 0 && w > 0, op, ": ", name, " must be positive, got [", h, ", ", w, "]");
  TORCH_CHECK(h <= INT32_MAX && w <= INT32_MAX, op, ": ", name, " must be below 2^31, got [",
              h, ", ", w, "]");
}

inline Plan make_plan(const char* op, const at::Tensor& big_side, const char* big_name,
                      at::IntArrayRef in_size, at::IntArrayRef out_size,
                      c10::string_view coordinate_mode,
                      const std::optional<at::ArrayRef<double>>& scale_factors) {
  OP_CHECK_FLOATING(op, big_name, big_side);
  Plan plan;
  plan.mode = parse_mode(op, coordinate_mode);
  plan.scale_h = plan.scale_w = -1.0;
  if (scale_factors.has_value()) {
    const auto sf = *scale_factors;
    TORCH_CHECK(sf.size() == 2, op, ": scale_factors must have 2 entries (H, W), got ", sf);
    TORCH_CHECK(sf[0] > 0 && sf[1] > 0 && std::isfinite(sf[0]) && std::isfinite(sf[1]), op,
                ": scale_factors must be positive and finite, got ", sf);
    plan.scale_h = sf[0];
    plan.scale_w = sf[1];
  }
  check_spatial(op, "input height and width", in_size[2], in_size[3]);
  check_spatial(op, "output_size", out_size[0], out_size[1]);
  plan.format = big_side.suggest_memory_format();
  plan.n = in_size[0];
  plan.c = in_size[1];
  const bool channels_last = plan.format == at::MemoryFormat::ChannelsLast;
  plan.geometry = Geometry{channels_last ? plan.n : plan.n * plan.c, channels_last ? plan.c : 1,
                           static_cast<int>(in_size[2]), static_cast<int>(in_size[3]),
                           static_cast<int>(out_size[0]), static_cast<int>(out_size[1])};
  return plan;
}

inline Plan forward_plan(const char* op, const at::Tensor& input, at::IntArrayRef output_size,
                         c10::string_view coordinate_mode,
                         const std::optional<at::ArrayRef<double>>& scale_factors) {
  TORCH_CHECK(input.dim() == 4, op, ": input must be a 4-D tensor (N, C, H, W), got ",
              input.dim(), "-D with shape ", input.sizes());
  TORCH_CHECK(output_size.size() == 2, op, ": output_size must have 2 entries (H, W), got ",
              output_size);
  return make_plan(op, input, "input", input.sizes(), output_size, coordinate_mode,
                   scale_factors);
}

inline Plan backward_plan(const char* op, const at::Tensor& grad_output, at::IntArrayRef input_size,
                          c10::string_view coordinate_mode,
                          const std::optional<at::ArrayRef<double>>& scale_factors) {
  TORCH_CHECK(grad_output.dim() == 4, op, ": grad_output must be a 4-D tensor (N, C, H, W), got ",
              grad_output.dim(), "-D with shape ", grad_output.sizes());
  TORCH_CHECK(input_size.size() == 4, op, ": input_size must have 4 entries (N, C, H, W), got ",
              input_size);
  TORCH_CHECK(grad_output.size(0) == input_size[0] && grad_output.size(1) == input_size[1], op,
              ": grad_output has shape ", grad_output.sizes(), " but input_size is ", input_size,
              " (N and C must agree)");
  return make_plan(op, grad_output, "grad_output", input_size, grad_output.sizes().slice(2),
                   coordinate_mode, scale_factors);
}

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
inline at::Tensor empty_result(const Plan& plan, at::IntArrayRef sizes, const at::Tensor& like) {
  return at::empty(sizes, like.options().memory_format(plan.format));
}

}  // namespace resize_op
