#pragma once
// Host side shared by the CPU (detection.cpp) and CUDA (detection_cuda.cpp) backends, on
// the stable ABI: argument checks that name the argument and show the bad value (ROIAlign's
// return the call's parameter block, which the kernels of both take) and NMS's boxes in
// score order.
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include <cmath>
#include <optional>
#include <vector>

#include "common/stable_checks.h"
#include "common/stable_ops.h"
#include "detection_types.h"

namespace detection {

inline void check_nms_args(const char* op, const torch::stable::Tensor& boxes, const torch::stable::Tensor& scores,
                           const torch::stable::Tensor* idxs) {
  OP_CHECK_FLOATING(op, "boxes", boxes);
  OP_CHECK_DIM(op, "boxes", boxes, 2);
  OP_CHECK_SIZE(op, "boxes", boxes, 1, 4);
  OP_CHECK_FLOATING(op, "scores", scores);
  OP_CHECK_DIM(op, "scores", scores, 1);
  OP_CHECK_SAME_DEVICE(op, "scores", scores, "boxes", boxes);
  OPS_CHECK(scores.size(0) == boxes.size(0), op, ": boxes and scores must have the same length, got ",
            boxes.size(0), " boxes and ", scores.size(0), " scores");
  if (idxs != nullptr) {
    OPS_CHECK(ops_common::is_integral(idxs->scalar_type()), op,
              ": idxs must be an integer tensor, got ", idxs->scalar_type());
    OP_CHECK_DIM(op, "idxs", *idxs, 1);
    OP_CHECK_SAME_DEVICE(op, "idxs", *idxs, "boxes", boxes);
    OPS_CHECK(idxs->size(0) == boxes.size(0), op, ": boxes and idxs must have the same length, got ",
              boxes.size(0), " boxes and ", idxs->size(0), " idxs");
  }
}

inline void check_roi_align_geometry(const char* op, int64_t pooled_height, int64_t pooled_width,
                                     double spatial_scale) {
  OPS_CHECK(pooled_height > 0 && pooled_width > 0, op,
            ": output_size must be positive, got (", pooled_height, ", ", pooled_width, ")");
  OPS_CHECK(pooled_height < (1 << 20) && pooled_width < (1 << 20), op,
            ": output_size is too large, got (", pooled_height, ", ", pooled_width, ")");
  OPS_CHECK(std::isfinite(spatial_scale), op, ": spatial_scale must be finite, got ", spatial_scale);
}

inline void check_rois(const char* op, const torch::stable::Tensor& rois, const torch::stable::Tensor& ref, const char* ref_name) {
  OP_CHECK_FLOATING(op, "rois", rois);
  OP_CHECK_DIM(op, "rois", rois, 2);
  OP_CHECK_SIZE(op, "rois", rois, 1, 5);
  OP_CHECK_SAME_DEVICE(op, "rois", rois, ref_name, ref);
}

// The parameter block of a roi_align call (detection_types.h), its arguments checked.
inline RoiAlignParams roi_align_params(const char* op, const torch::stable::Tensor& input,
                                       const torch::stable::Tensor& rois, double spatial_scale,
                                       int64_t pooled_height, int64_t pooled_width,
                                       int64_t sampling_ratio, bool aligned) {
  OP_CHECK_FLOATING(op, "input", input);
  OP_CHECK_DIM(op, "input", input, 4);
  check_rois(op, rois, input, "input");
  check_roi_align_geometry(op, pooled_height, pooled_width, spatial_scale);
  return {rois.size(0), input.size(0), input.size(1), input.size(2), input.size(3),
          static_cast<int>(pooled_height), static_cast<int>(pooled_width),
          static_cast<int>(sampling_ratio), spatial_scale, aligned};
}

// The same for roi_align_backward, whose input sizes are arguments.
inline RoiAlignParams roi_align_backward_params(
    const char* op, const torch::stable::Tensor& grad, const torch::stable::Tensor& rois,
    double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t batch,
    int64_t channels, int64_t height, int64_t width, int64_t sampling_ratio, bool aligned) {
  OP_CHECK_FLOATING(op, "grad", grad);
  OP_CHECK_DIM(op, "grad", grad, 4);
  check_rois(op, rois, grad, "grad");
  check_roi_align_geometry(op, pooled_height, pooled_width, spatial_scale);
  OPS_CHECK(batch >= 0 && channels >= 0 && height >= 0 && width >= 0, op,
            ": input sizes must be non-negative, got (", batch, ", ", channels, ", ", height, ", ", width, ")");
  const std::vector<int64_t> expected{rois.size(0), channels, pooled_height, pooled_width};
  OPS_CHECK(ops_common::list_of(expected) == ops_common::shape_of(grad), op,
            ": grad must have shape ", ops_common::list_of(expected),
            " (rois, channels, output_size), got ", ops_common::shape_of(grad));
  return {rois.size(0), batch, channels, height, width, static_cast<int>(pooled_height),
          static_cast<int>(pooled_width), static_cast<int>(sampling_ratio), spatial_scale, aligned};
}

// rois as the kernels of both backends read them: contiguous, in the accumulation type of
// scalar_t.
template <typename scalar_t>
torch::stable::Tensor rois_for(const torch::stable::Tensor& rois) {
  return ops_common::contiguous(
      ops_common::to_dtype(rois, ops_common::scalar_type_of<ops_common::opmath_t<scalar_t>>()));
}

// The boxes of an NMS call in score order (a stable sort, as torchvision sorts: tied scores
// keep their index order), contiguous in dtype compute, and their classes (int64) for
// batched NMS.
struct NmsInput {
  torch::stable::Tensor order, boxes;
  std::optional<torch::stable::Tensor> classes;
};

inline NmsInput nms_input(const torch::stable::Tensor& boxes, const torch::stable::Tensor& scores,
                          const torch::stable::Tensor* idxs,
                          torch::headeronly::ScalarType compute) {
  NmsInput in;
  in.order = ops_common::argsort_descending_stable(scores);
  in.boxes = ops_common::contiguous(
      ops_common::to_dtype(ops_common::index_select(boxes, 0, in.order), compute));
  if (idxs != nullptr) {
    in.classes = ops_common::contiguous(ops_common::to_dtype(
        ops_common::index_select(*idxs, 0, in.order), torch::headeronly::ScalarType::Long));
  }
  return in;
}

}  // namespace detection
