#pragma once
// The CPU kernels of the detection ops (detection_cpu.cpp), for the host side in
// detection.cpp: raw pointers to contiguous buffers, on all threads.
#include <cstdint>

#include "detection_types.h"

namespace detection {

// NMS of n boxes (x1, y1, x2, y2) in score order (float or double), with their classes for
// batched NMS (else null): writes order[i] of each kept position i to keep, by decreasing
// score, and returns how many were kept.
template <typename T>
int64_t nms_cpu_kernel(const T* boxes_sorted, const int64_t* classes_sorted,
                       const int64_t* order, int64_t n, double iou_threshold, int64_t* keep);

// ROIAlign forward: input (N, C, H, W), rois (K, 5) in the accumulation type A and the
// batch index of each roi, output (K, C, PH, PW). T is float, double, c10::Half or
// c10::BFloat16.
template <typename T, typename A>
void roi_align_forward_cpu_kernel(const T* input, const A* rois, const int64_t* batches,
                                  const RoiAlignParams& p, T* output);

// ROIAlign backward: adds the gradient grad (K, C, PH, PW) pulls into grad_input
// (N, C, H, W, in A, zero-filled by the caller), deterministically.
template <typename T, typename A>
void roi_align_backward_cpu_kernel(const T* grad, const A* rois, const int64_t* batches,
                                   const RoiAlignParams& p, A* grad_input);

}  // namespace detection
