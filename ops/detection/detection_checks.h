#pragma once
// Argument checks of the detection ops, shared by the CPU and CUDA host code: each names
// the argument and shows the bad value.
#include <ATen/ATen.h>

#include "common/checks.h"

namespace detection {

inline void check_nms_args(const char* op, const at::Tensor& boxes, const at::Tensor& scores,
                           const at::Tensor* idxs) {
  OP_CHECK_FLOATING(op, "boxes", boxes);
  OP_CHECK_DIM(op, "boxes", boxes, 2);
  OP_CHECK_SIZE(op, "boxes", boxes, 1, 4);
  OP_CHECK_FLOATING(op, "scores", scores);
  OP_CHECK_DIM(op, "scores", scores, 1);
  OP_CHECK_SAME_DEVICE(op, "scores", scores, "boxes", boxes);
  TORCH_CHECK(scores.size(0) == boxes.size(0), op, ": boxes and scores must have the same length, got ",
              boxes.size(0), " boxes and ", scores.size(0), " scores");
  if (idxs != nullptr) {
    TORCH_CHECK(!idxs->is_floating_point() && !idxs->is_complex() && idxs->scalar_type() != at::kBool,
                op, ": idxs must be an integer tensor, got ", idxs->scalar_type());
    OP_CHECK_DIM(op, "idxs", *idxs, 1);
    OP_CHECK_SAME_DEVICE(op, "idxs", *idxs, "boxes", boxes);
    TORCH_CHECK(idxs->size(0) == boxes.size(0), op, ": boxes and idxs must have the same length, got ",
                boxes.size(0), " boxes and ", idxs->size(0), " idxs");
  }
}

inline void check_roi_align_geometry(const char* op, int64_t pooled_height, int64_t pooled_width,
                                     double spatial_scale) {
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, op,
              ": output_size must be positive, got (", pooled_height, ", ", pooled_width, ")");
  TORCH_CHECK(pooled_height < (1 << 20) && pooled_width < (1 << 20), op,
              ": output_size is too large, got (", pooled_height, ", ", pooled_width, ")");
  TORCH_CHECK(std::isfinite(spatial_scale), op, ": spatial_scale must be finite, got ", spatial_scale);
}

inline void check_rois(const char* op, const at::Tensor& rois, const at::Tensor& ref, const char* ref_name) {
  OP_CHECK_FLOATING(op, "rois", rois);
  OP_CHECK_DIM(op, "rois", rois, 2);
  OP_CHECK_SIZE(op, "rois", rois, 1, 5);
  OP_CHECK_SAME_DEVICE(op, "rois", rois, ref_name, ref);
}

inline void check_roi_align_args(const char* op, const at::Tensor& input, const at::Tensor& rois,
                                 double spatial_scale, int64_t pooled_height, int64_t pooled_width) {
  OP_CHECK_FLOATING(op, "input", input);
  OP_CHECK_DIM(op, "input", input, 4);
  check_rois(op, rois, input, "input");
  check_roi_align_geometry(op, pooled_height, pooled_width, spatial_scale);
}

inline void check_roi_align_backward_args(const char* op, const at::Tensor& grad, const at::Tensor& rois,
                                          double spatial_scale, int64_t pooled_height,
                                          int64_t pooled_width, int64_t batch, int64_t channels,
                                          int64_t height, int64_t width) {
  OP_CHECK_FLOATING(op, "grad", grad);
  OP_CHECK_DIM(op, "grad", grad, 4);
  check_rois(op, rois, grad, "grad");
  check_roi_align_geometry(op, pooled_height, pooled_width, spatial_scale);
  TORCH_CHECK(batch >= 0 && channels >= 0 && height >= 0 && width >= 0, op,
              ": input sizes must be non-negative, got (", batch, ", ", channels, ", ", height, ", ", width, ")");
  const std::vector<int64_t> expected{rois.size(0), channels, pooled_height, pooled_width};
  TORCH_CHECK(grad.sizes() == at::IntArrayRef(expected), op, ": grad must have shape ", expected,
              " (rois, channels, output_size), got ", grad.sizes());
}

}  // namespace detection
