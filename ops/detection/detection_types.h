#pragma once
// Detection: what the host side shares with the kernels (torch-free). The math of NMS and
// ROIAlign is in detection.h, which only the kernel units include (detection_cpu.cpp,
// detection_cuda.cu); the host side (detection.cpp, detection_cuda.cpp) needs this only.
#include <cstdint>

namespace detection {

// Boxes of one NMS block: the reduction resolves 64 candidates per step, one bit each
// (the CUDA mask holds one 64-bit word per block of boxes).
constexpr int kNmsBlock = 64;

// One ROIAlign call, for the CPU kernels and the CUDA launchers and kernels alike: rois
// (num_rois, 5) over a feature map (batch, channels, height, width), output_size
// (pooled_height, pooled_width), torchvision's spatial_scale, sampling_ratio and aligned.
struct RoiAlignParams {
  int64_t num_rois, batch, channels, height, width;
  int pooled_height, pooled_width, sampling_ratio;
  double spatial_scale;
  bool aligned;
};

}  // namespace detection
