#pragma once
// Launchers of the detection CUDA kernels (torch-free): detection_cuda.cu defines them,
// detection_cuda.cpp calls them with raw pointers, ROIAlign's parameter block
// (detection_types.h) and the current stream.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/cuda_types.h"
#include "detection_types.h"

namespace detection {

// NMS, step 1: bit j of mask[i * col_blocks + j / 64] says that box j (sorted order,
// j > i) overlaps box i above the threshold (and has the same class when classes != null).
template <typename T>
cudaError_t launch_nms_mask(const T* boxes_sorted, const int64_t* classes_sorted, int64_t n,
                            float iou_threshold, uint64_t* mask, cudaStream_t stream);

// NMS, step 2: one block walks the mask in 64-box steps and writes the kept indices
// (order[i] of each kept sorted position i, by decreasing score) and their number.
cudaError_t launch_nms_reduce(const uint64_t* mask, const int64_t* order, int64_t n,
                              int64_t* keep, int64_t* num_kept, cudaStream_t stream);

// ROIAlign forward: input (N, C, H, W) contiguous, rois (K, 5) in the accumulation type
// acc_t<T>, output (K, C, PH, PW).
template <typename T>
cudaError_t launch_roi_align_forward(const T* input, const ops_common::acc_t<T>* rois,
                                     const RoiAlignParams& params, T* output, cudaStream_t stream);

// ROIAlign backward as a gather: every input pixel sums what the rois took from it, so
// grad_input is written once per element, without atomics and deterministically.
template <typename T>
cudaError_t launch_roi_align_backward(const T* grad_output, const ops_common::acc_t<T>* rois,
                                      const RoiAlignParams& params, T* grad_input,
                                      cudaStream_t stream);

// ROIAlign backward as a tiled gather from grad_t, the output gradient transposed to
// (K, PH, PW, C): deterministic like launch_roi_align_backward, and faster where the
// weights of one tile fit in shared memory (roi_align_tiles_fit).
template <typename T>
cudaError_t launch_roi_align_backward_tiles(const T* grad_t, const ops_common::acc_t<T>* rois,
                                            const RoiAlignParams& params, T* grad_input,
                                            cudaStream_t stream);

inline bool roi_align_tiles_fit(int64_t pooled_height, int64_t pooled_width, size_t acc_bytes) {
  return 2 * (8 * pooled_height + 16 * pooled_width) * acc_bytes <= 48 * 1024;
}

}  // namespace detection
