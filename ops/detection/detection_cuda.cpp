// Detection ops: CUDA host side (checks, device guard, stream, dtype dispatch, allocation);
// the kernels are in detection_cuda.cu.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <vector>

#include "common/stable_cuda_host.h"
#include "common/stable_ops.h"
#include "detection_cuda.h"
#include "detection_host.h"

namespace {

using detection::RoiAlignParams;
using ops_common::cuda_ptr;
using ops_common::cuda_t;
using torch::headeronly::ScalarType;
using torch::stable::Tensor;

Tensor nms_cuda_impl(const char* op, const Tensor& boxes, const Tensor& scores, const Tensor* idxs,
                     double iou_threshold) {
  detection::check_nms_args(op, boxes, scores, idxs);
  const ops_common::DeviceGuard guard(boxes.get_device_index());
  const int64_t n = boxes.size(0);
  if (n == 0) return torch::stable::new_empty(boxes, std::vector<int64_t>{0}, ScalarType::Long);
  const detection::NmsInput in = detection::nms_input(boxes, scores, idxs, boxes.scalar_type());
  const int64_t col_blocks = (n + detection::kNmsBlock - 1) / detection::kNmsBlock;
  Tensor mask = torch::stable::new_empty(boxes, std::vector<int64_t>{n * col_blocks}, ScalarType::Long);
  Tensor keep = torch::stable::new_empty(boxes, std::vector<int64_t>{n}, ScalarType::Long);
  Tensor num_kept = torch::stable::new_empty(boxes, std::vector<int64_t>{1}, ScalarType::Long);
  const cudaStream_t stream = ops_common::current_stream(boxes);
  auto* mask_ptr = reinterpret_cast<uint64_t*>(mask.mutable_data_ptr<int64_t>());
  OPS_DISPATCH_FLOATING(in.boxes.scalar_type(), "nms_cuda", [&] {
    OPS_CHECK_LAUNCH(detection::launch_nms_mask<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(in.boxes), in.classes ? in.classes->const_data_ptr<int64_t>() : nullptr,
        n, static_cast<float>(iou_threshold), mask_ptr, stream));
  });
  OPS_CHECK_LAUNCH(detection::launch_nms_reduce(mask_ptr, in.order.const_data_ptr<int64_t>(), n,
                                                keep.mutable_data_ptr<int64_t>(),
                                                num_kept.mutable_data_ptr<int64_t>(), stream));
  // The one host sync: the output's length is the number of kept boxes, which only the
  // device knows. The mask itself never leaves the device.
  int64_t count = 0;
  STD_CUDA_CHECK(cudaMemcpyAsync(&count, num_kept.const_data_ptr<int64_t>(), sizeof(count),
                                 cudaMemcpyDeviceToHost, stream));
  STD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return torch::stable::narrow(keep, 0, 0, count);
}

Tensor nms_cuda(const Tensor& boxes, const Tensor& scores, double iou_threshold) {
  return nms_cuda_impl("detection.nms", boxes, scores, nullptr, iou_threshold);
}

Tensor batched_nms_cuda(const Tensor& boxes, const Tensor& scores, const Tensor& idxs,
                        double iou_threshold) {
  return nms_cuda_impl("detection.batched_nms", boxes, scores, &idxs, iou_threshold);
}

Tensor roi_align_cuda(const Tensor& input, const Tensor& rois, double spatial_scale,
                      int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
  const RoiAlignParams p = detection::roi_align_params("detection.roi_align", input, rois, spatial_scale,
                                                       pooled_height, pooled_width, sampling_ratio, aligned);
  const ops_common::DeviceGuard guard(input.get_device_index());
  const Tensor x = ops_common::contiguous(input);
  Tensor output = torch::stable::new_empty(x, std::vector<int64_t>{p.num_rois, p.channels, pooled_height, pooled_width});
  if (output.numel() == 0) return output;
  OPS_DISPATCH_FLOATING(x.scalar_type(), "roi_align_cuda", [&] {
    const Tensor r = detection::rois_for<scalar_t>(rois);
    OPS_CHECK_LAUNCH(detection::launch_roi_align_forward(
        cuda_ptr<scalar_t>(x), r.const_data_ptr<ops_common::opmath_t<scalar_t>>(), p,
        cuda_ptr<scalar_t>(output), ops_common::current_stream(x)));
  });
  return output;
}

Tensor roi_align_backward_cuda(const Tensor& grad, const Tensor& rois, double spatial_scale,
                               int64_t pooled_height, int64_t pooled_width, int64_t batch,
                               int64_t channels, int64_t height, int64_t width, int64_t sampling_ratio,
                               bool aligned) {
  const RoiAlignParams p = detection::roi_align_backward_params(
      "detection.roi_align_backward", grad, rois, spatial_scale, pooled_height, pooled_width, batch,
      channels, height, width, sampling_ratio, aligned);
  const ops_common::DeviceGuard guard(grad.get_device_index());
  const Tensor g = ops_common::contiguous(grad);
  // Every element is written by the gather kernel: no zero fill needed.
  Tensor grad_input = torch::stable::new_empty(g, std::vector<int64_t>{batch, channels, height, width});
  if (grad_input.numel() == 0) return grad_input;
  if (g.numel() == 0) return torch::stable::zero_(grad_input);
  OPS_DISPATCH_FLOATING(g.scalar_type(), "roi_align_backward_cuda", [&] {
    using A = ops_common::opmath_t<scalar_t>;
    const Tensor r = detection::rois_for<scalar_t>(rois);
    const cudaStream_t stream = ops_common::current_stream(g);
    if (detection::roi_align_tiles_fit(pooled_height, pooled_width, sizeof(A))) {
      // Channels innermost, so that a warp reads one bin's channels in one coalesced load:
      // (K, C, PH, PW) -> (K, PH, PW, C), two transposes (2.11's stable API has no permute).
      const Tensor gt = ops_common::contiguous(
          torch::stable::transpose(torch::stable::transpose(g, 1, 2), 2, 3));
      OPS_CHECK_LAUNCH(detection::launch_roi_align_backward_tiles(
          cuda_ptr<scalar_t>(gt), r.const_data_ptr<A>(), p, cuda_ptr<scalar_t>(grad_input), stream));
      return;
    }
    OPS_CHECK_LAUNCH(detection::launch_roi_align_backward(
        cuda_ptr<scalar_t>(g), r.const_data_ptr<A>(), p, cuda_ptr<scalar_t>(grad_input), stream));
  });
  return grad_input;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(detection, CUDA, m) {
  m.impl("nms", TORCH_BOX(&nms_cuda));
  m.impl("batched_nms", TORCH_BOX(&batched_nms_cuda));
  m.impl("roi_align", TORCH_BOX(&roi_align_cuda));
  m.impl("roi_align_backward", TORCH_BOX(&roi_align_backward_cuda));
}
