// resize: the host side shared by the CPU and CUDA backends (resize_host.h): argument
// checks and plans. A unit of its own, so that an edit of resize.cpp or resize_cuda.cpp
// compiles none of it (about a third of resize.cpp's compile when it was inline).
#include "common/host_glue.h"  // first: the unit compiles at -O1 (see there)

#include "resize_host.h"

namespace resize_op {

CoordinateMode parse_mode(const char* op, const std::string& mode) {
  if (mode == "half_pixel") return CoordinateMode::kHalfPixel;
  if (mode == "align_corners") return CoordinateMode::kAlignCorners;
  if (mode == "asymmetric") return CoordinateMode::kAsymmetric;
  OPS_CHECK(false, op, ": coordinate_mode must be one of 'half_pixel', 'align_corners', "
            "'asymmetric', got '", mode, "'");
}

void check_spatial(const char* op, const char* name, int64_t h, int64_t w) {
  OPS_CHECK(h > 0 && w > 0, op, ": ", name, " must be positive, got [", h, ", ", w, "]");
  OPS_CHECK(h <= INT32_MAX && w <= INT32_MAX, op, ": ", name, " must be below 2^31, got [",
            h, ", ", w, "]");
}

Plan make_plan(const char* op, const Tensor& big_side, const char* big_name,
               const std::vector<int64_t>& in_size, int64_t out_h, int64_t out_w,
               const std::string& coordinate_mode,
               const std::optional<std::vector<double>>& scale_factors) {
  OP_CHECK_FLOATING(op, big_name, big_side);
  Plan plan;
  plan.mode = parse_mode(op, coordinate_mode);
  plan.scale_h = plan.scale_w = -1.0;
  if (scale_factors.has_value()) {
    const std::vector<double>& sf = *scale_factors;
    OPS_CHECK(sf.size() == 2, op, ": scale_factors must have 2 entries (H, W), got ",
              ops_common::list_of(sf));
    OPS_CHECK(sf[0] > 0 && sf[1] > 0 && std::isfinite(sf[0]) && std::isfinite(sf[1]), op,
              ": scale_factors must be positive and finite, got ", ops_common::list_of(sf));
    plan.scale_h = sf[0];
    plan.scale_w = sf[1];
  }
  check_spatial(op, "input height and width", in_size[2], in_size[3]);
  check_spatial(op, "output_size", out_h, out_w);
  plan.format = ops_common::suggest_memory_format(big_side);
  plan.n = in_size[0];
  plan.c = in_size[1];
  const bool channels_last = plan.format == MemoryFormat::ChannelsLast;
  plan.geometry = Geometry{channels_last ? plan.n : plan.n * plan.c, channels_last ? plan.c : 1,
                           static_cast<int>(in_size[2]), static_cast<int>(in_size[3]),
                           static_cast<int>(out_h), static_cast<int>(out_w)};
  return plan;
}

Plan forward_plan(const char* op, const Tensor& input, const std::vector<int64_t>& output_size,
                  const std::string& coordinate_mode,
                  const std::optional<std::vector<double>>& scale_factors) {
  OPS_CHECK(input.dim() == 4, op, ": input must be a 4-D tensor (N, C, H, W), got ",
            input.dim(), "-D with shape ", ops_common::shape_of(input));
  OPS_CHECK(output_size.size() == 2, op, ": output_size must have 2 entries (H, W), got ",
            ops_common::list_of(output_size));
  const std::vector<int64_t> in_size(input.sizes().begin(), input.sizes().end());
  return make_plan(op, input, "input", in_size, output_size[0], output_size[1], coordinate_mode,
                   scale_factors);
}

Plan backward_plan(const char* op, const Tensor& grad_output,
                   const std::vector<int64_t>& input_size, const std::string& coordinate_mode,
                   const std::optional<std::vector<double>>& scale_factors) {
  OPS_CHECK(grad_output.dim() == 4, op,
            ": grad_output must be a 4-D tensor (N, C, H, W), got ", grad_output.dim(),
            "-D with shape ", ops_common::shape_of(grad_output));
  OPS_CHECK(input_size.size() == 4, op, ": input_size must have 4 entries (N, C, H, W), got ",
            ops_common::list_of(input_size));
  OPS_CHECK(grad_output.size(0) == input_size[0] && grad_output.size(1) == input_size[1], op,
            ": grad_output has shape ", ops_common::shape_of(grad_output), " but input_size is ",
            ops_common::list_of(input_size), " (N and C must agree)");
  return make_plan(op, grad_output, "grad_output", input_size, grad_output.size(2),
                   grad_output.size(3), coordinate_mode, scale_factors);
}

// The output of either pass: the given sizes in the plan's memory format (the suggested
// format of the tensor the pass reads, as the fake kernels compute it).
Tensor empty_result(const Plan& plan, const std::vector<int64_t>& sizes, const Tensor& like) {
  return ops_common::empty_dense(sizes.data(), static_cast<int64_t>(sizes.size()), plan.format,
                                 like);
}

}  // namespace resize_op
