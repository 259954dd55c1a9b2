// Detection ops: CUDA host side (checks, device guard, stream, dtype dispatch, allocation);
// the kernels are in detection_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "common/cuda_host.h"
#include "detection.h"
#include "detection_checks.h"
#include "detection_cuda.h"

namespace {

using ops_common::cuda_ptr;
using ops_common::cuda_t;

at::Tensor nms_cuda_impl(const char* op, const at::Tensor& boxes, const at::Tensor& scores,
                         const at::Tensor* idxs, double iou_threshold) {
  detection::check_nms_args(op, boxes, scores, idxs);
  const c10::cuda::CUDAGuard guard(boxes.device());
  const int64_t n = boxes.size(0);
  if (n == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  // Stable, as torchvision sorts: tied scores keep their index order.
  const at::Tensor order = std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  const at::Tensor sorted = boxes.index_select(0, order).contiguous();
  at::Tensor classes;
  if (idxs != nullptr) classes = idxs->index_select(0, order).to(at::kLong).contiguous();
  const int64_t col_blocks = (n + detection::kNmsBlock - 1) / detection::kNmsBlock;
  at::Tensor mask = at::empty({n * col_blocks}, boxes.options().dtype(at::kLong));
  at::Tensor keep = at::empty({n}, boxes.options().dtype(at::kLong));
  at::Tensor num_kept = at::empty({1}, boxes.options().dtype(at::kLong));
  const cudaStream_t stream = ops_common::current_stream();
  auto* mask_ptr = reinterpret_cast<uint64_t*>(mask.data_ptr<int64_t>());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, sorted.scalar_type(), "nms_cuda", [&] {
    OPS_CHECK_LAUNCH(detection::launch_nms_mask<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(sorted), classes.defined() ? classes.const_data_ptr<int64_t>() : nullptr, n,
        static_cast<float>(iou_threshold), mask_ptr, stream));
  });
  OPS_CHECK_LAUNCH(detection::launch_nms_reduce(mask_ptr, order.const_data_ptr<int64_t>(), n,
                                                keep.data_ptr<int64_t>(), num_kept.data_ptr<int64_t>(),
                                                stream));
  // The one host sync: the output's length is the number of kept boxes, which only the
  // device knows. The mask itself never leaves the device.
  const int64_t count = num_kept.item<int64_t>();
  return keep.narrow(0, 0, count);
}

at::Tensor nms_cuda(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  return nms_cuda_impl("detection.nms", boxes, scores, nullptr, iou_threshold);
}

at::Tensor batched_nms_cuda(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs,
                            double iou_threshold) {
  return nms_cuda_impl("detection.batched_nms", boxes, scores, &idxs, iou_threshold);
}

at::Tensor roi_align_cuda(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                          int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                          bool aligned) {
  constexpr const char* op = "detection.roi_align";
  detection::check_roi_align_args(op, input, rois, spatial_scale, pooled_height, pooled_width);
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  at::Tensor output = at::empty({rois.size(0), input.size(1), pooled_height, pooled_width}, x.options());
  if (output.numel() == 0) return output;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "roi_align_cuda", [&] {
    using T = cuda_t<scalar_t>;
    using A = at::opmath_type<scalar_t>;
    const at::Tensor r = rois.to(c10::CppTypeToScalarType<A>::value).contiguous();
    OPS_CHECK_LAUNCH((detection::launch_roi_align_forward<T, A>(
        cuda_ptr<scalar_t>(x), r.const_data_ptr<A>(), rois.size(0), x.size(0), x.size(1), x.size(2),
        x.size(3), static_cast<int>(pooled_height), static_cast<int>(pooled_width),
        static_cast<A>(spatial_scale), static_cast<int>(sampling_ratio), aligned,
        cuda_ptr<scalar_t>(output), ops_common::current_stream())));
  });
  return output;
}

at::Tensor roi_align_backward_cuda(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                                   int64_t pooled_height, int64_t pooled_width, int64_t batch,
                                   int64_t channels, int64_t height, int64_t width,
                                   int64_t sampling_ratio, bool aligned) {
  constexpr const char* op = "detection.roi_align_backward";
  detection::check_roi_align_backward_args(op, grad, rois, spatial_scale, pooled_height, pooled_width,
                                           batch, channels, height, width);
  const c10::cuda::CUDAGuard guard(grad.device());
  const at::Tensor g = grad.contiguous();
  // Every element is written by the gather kernel: no zero fill needed.
  at::Tensor grad_input = at::empty({batch, channels, height, width}, g.options());
  if (grad_input.numel() == 0) return grad_input;
  if (g.numel() == 0) return grad_input.zero_();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "roi_align_backward_cuda", [&] {
    using T = cuda_t<scalar_t>;
    using A = at::opmath_type<scalar_t>;
    const at::Tensor r = rois.to(c10::CppTypeToScalarType<A>::value).contiguous();
    if (detection::roi_align_tiles_fit(pooled_height, pooled_width, sizeof(A))) {
      // Channels innermost, so that a warp reads one bin's channels in one coalesced load.
      const at::Tensor gt = g.permute({0, 2, 3, 1}).contiguous();
      OPS_CHECK_LAUNCH((detection::launch_roi_align_backward_tiles<T, A>(
          cuda_ptr<scalar_t>(gt), r.const_data_ptr<A>(), rois.size(0), batch, channels, height, width,
          static_cast<int>(pooled_height), static_cast<int>(pooled_width), static_cast<A>(spatial_scale),
          static_cast<int>(sampling_ratio), aligned, cuda_ptr<scalar_t>(grad_input),
          ops_common::current_stream())));
      return;
    }
    OPS_CHECK_LAUNCH((detection::launch_roi_align_backward<T, A>(
        cuda_ptr<scalar_t>(g), r.const_data_ptr<A>(), rois.size(0), batch, channels, height, width,
        static_cast<int>(pooled_height), static_cast<int>(pooled_width), static_cast<A>(spatial_scale),
        static_cast<int>(sampling_ratio), aligned, cuda_ptr<scalar_t>(grad_input),
        ops_common::current_stream())));
  });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(detection, CUDA, m) {
  m.impl("nms", &nms_cuda);
  m.impl("batched_nms", &batched_nms_cuda);
  m.impl("roi_align", &roi_align_cuda);
  m.impl("roi_align_backward", &roi_align_backward_cuda);
}
