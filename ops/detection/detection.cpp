// Detection ops (NMS, batched NMS, ROIAlign): schema and CPU host side, torchvision's
// semantics, on the stable ABI (the autograd of roi_align is in detection.py). Checks and
// the steps both backends share in detection_host.h; the kernels, over the math of
// detection.h, in detection_cpu.cpp.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <vector>

#include "common/stable_ops.h"
#include "detection_cpu.h"
#include "detection_host.h"

namespace {

using detection::RoiAlignParams;
using torch::headeronly::ScalarType;
using torch::stable::Tensor;

// ---------------------------------------------------------------------------------------
// NMS
// ---------------------------------------------------------------------------------------

Tensor nms_cpu_impl(const char* op, const Tensor& boxes, const Tensor& scores, const Tensor* idxs,
                    double iou_threshold) {
  detection::check_nms_args(op, boxes, scores, idxs);
  const int64_t n = boxes.size(0);
  if (n == 0) return torch::stable::new_empty(boxes, std::vector<int64_t>{0}, ScalarType::Long);
  // 16-bit boxes are compared in float on the CPU.
  const ScalarType compute = boxes.scalar_type() == ScalarType::Double ? ScalarType::Double
                                                                       : ScalarType::Float;
  const detection::NmsInput in = detection::nms_input(boxes, scores, idxs, compute);
  const int64_t* c = in.classes ? in.classes->const_data_ptr<int64_t>() : nullptr;
  const int64_t* o = in.order.const_data_ptr<int64_t>();
  Tensor keep = torch::stable::new_empty(in.order, std::vector<int64_t>{n});
  int64_t* k = keep.mutable_data_ptr<int64_t>();
  const int64_t num_kept =
      compute == ScalarType::Double
          ? detection::nms_cpu_kernel(in.boxes.const_data_ptr<double>(), c, o, n, iou_threshold, k)
          : detection::nms_cpu_kernel(in.boxes.const_data_ptr<float>(), c, o, n, iou_threshold, k);
  return torch::stable::narrow(keep, 0, 0, num_kept);
}

Tensor nms_cpu(const Tensor& boxes, const Tensor& scores, double iou_threshold) {
  return nms_cpu_impl("detection.nms", boxes, scores, nullptr, iou_threshold);
}

Tensor batched_nms_cpu(const Tensor& boxes, const Tensor& scores, const Tensor& idxs,
                       double iou_threshold) {
  return nms_cpu_impl("detection.batched_nms", boxes, scores, &idxs, iou_threshold);
}

// ---------------------------------------------------------------------------------------
// ROIAlign
// ---------------------------------------------------------------------------------------

// Batch index of every roi, checked here since the rois are on the host anyway.
template <typename A>
std::vector<int64_t> roi_batches(const char* op, const A* rois, int64_t num_rois, int64_t batch) {
  std::vector<int64_t> out(num_rois);
  for (int64_t r = 0; r < num_rois; ++r) {
    const A b = rois[r * 5];
    OPS_CHECK(b >= A(0) && b < static_cast<A>(batch), op, ": rois[", r,
              ", 0] must be a batch index in [0, ", batch, "), got ", static_cast<double>(b));
    out[r] = static_cast<int64_t>(b);
  }
  return out;
}

// Runs kernel(rois, batches) with the rois in the accumulation type A of scalar_t and the
// batch index of each, checked.
template <typename scalar_t, typename F>
void with_rois(const char* op, const Tensor& rois, const RoiAlignParams& p, F&& kernel) {
  using A = ops_common::opmath_t<scalar_t>;
  const Tensor r = detection::rois_for<scalar_t>(rois);
  const A* rp = r.const_data_ptr<A>();
  kernel(rp, roi_batches(op, rp, p.num_rois, p.batch).data());
}

Tensor roi_align_cpu(const Tensor& input, const Tensor& rois, double spatial_scale,
                     int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
  constexpr const char* op = "detection.roi_align";
  const RoiAlignParams p = detection::roi_align_params(op, input, rois, spatial_scale, pooled_height,
                                                       pooled_width, sampling_ratio, aligned);
  const Tensor x = ops_common::contiguous(input);
  Tensor output = torch::stable::new_empty(x, std::vector<int64_t>{p.num_rois, p.channels, pooled_height, pooled_width});
  if (output.numel() == 0) return output;
  OPS_DISPATCH_FLOATING(x.scalar_type(), "roi_align_cpu", [&] {
    with_rois<scalar_t>(op, rois, p, [&](const auto* r, const int64_t* batches) {
      detection::roi_align_forward_cpu_kernel(x.const_data_ptr<scalar_t>(), r, batches, p,
                                              output.mutable_data_ptr<scalar_t>());
    });
  });
  return output;
}

Tensor roi_align_backward_cpu(const Tensor& grad, const Tensor& rois, double spatial_scale,
                              int64_t pooled_height, int64_t pooled_width, int64_t batch,
                              int64_t channels, int64_t height, int64_t width, int64_t sampling_ratio,
                              bool aligned) {
  constexpr const char* op = "detection.roi_align_backward";
  const RoiAlignParams p = detection::roi_align_backward_params(
      op, grad, rois, spatial_scale, pooled_height, pooled_width, batch, channels, height, width,
      sampling_ratio, aligned);
  const Tensor g = ops_common::contiguous(grad);
  // Accumulated in the op-math type (float for 16-bit grads), rounded once at the end.
  const ScalarType acc_type = g.scalar_type() == ScalarType::Double ? ScalarType::Double
                                                                    : ScalarType::Float;
  Tensor grad_input = torch::stable::new_zeros(g, std::vector<int64_t>{batch, channels, height, width}, acc_type);
  if (grad_input.numel() == 0 || g.numel() == 0) return ops_common::to_dtype(grad_input, g.scalar_type());
  OPS_DISPATCH_FLOATING(g.scalar_type(), "roi_align_backward_cpu", [&] {
    with_rois<scalar_t>(op, rois, p, [&](const auto* r, const int64_t* batches) {
      using A = ops_common::opmath_t<scalar_t>;
      detection::roi_align_backward_cpu_kernel(g.const_data_ptr<scalar_t>(), r, batches, p,
                                               grad_input.mutable_data_ptr<A>());
    });
  });
  return ops_common::to_dtype(grad_input, g.scalar_type());
}

}  // namespace

STABLE_TORCH_LIBRARY(detection, m) {
  m.def("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor");
  m.def("batched_nms(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold) -> Tensor");
  m.def("roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, "
        "int pooled_width, int sampling_ratio, bool aligned) -> Tensor");
  m.def("roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, "
        "int pooled_width, int batch_size, int channels, int height, int width, "
        "int sampling_ratio, bool aligned) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(detection, CPU, m) {
  m.impl("nms", TORCH_BOX(&nms_cpu));
  m.impl("batched_nms", TORCH_BOX(&batched_nms_cpu));
  m.impl("roi_align", TORCH_BOX(&roi_align_cpu));
  m.impl("roi_align_backward", TORCH_BOX(&roi_align_backward_cpu));
}
