#pragma once
// Detection: what the host side shares with the kernels (torch-free). The math of NMS and
// ROIAlign is in detection.h, which the CPU kernels (detection.cpp) and the CUDA kernels
// (detection_cuda.cu) include; the CUDA host side (detection_cuda.cpp) needs this only.

namespace detection {

// Boxes of one NMS block: the reduction resolves 64 candidates per step, one bit each
// (the CUDA mask holds one 64-bit word per block of boxes).
constexpr int kNmsBlock = 64;

}  // namespace detection
