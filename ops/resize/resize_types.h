#pragma once
// Bilinear resize: the types its host side and its kernels share (torch-free): the
// coordinate modes, the map of one spatial axis and how the host makes it, the taps of an
// output index, the sizes of a resize. The coordinate math over them is in resize.h, which
// only the CPU kernels (resize_cpu.cpp) and the CUDA kernels (resize_cuda.cu) include: an
// edit of the math recompiles no host glue (ARCHITECTURE.md, "Header edits").
#include <cstdint>

namespace resize_op {

enum class CoordinateMode : int { kHalfPixel = 0, kAlignCorners = 1, kAsymmetric = 2 };

// One spatial axis: src = max(fma(d + shift, scale, -shift), 0), shift 0.5 or 0 (then
// the fma is the single rounding of d * scale).
template <typename T>
struct AxisMap {
  int in_size;
  int out_size;
  T scale;  // input pixels per output pixel
  T shift;
};

// The taps of one output index: input indices i0 <= i1 and the weight l of i1.
template <typename T>
struct Taps {
  int i0;
  int i1;
  T l1;
};

// F.interpolate's scale rule (area_pixel_compute_scale): align_corners ignores a given
// scale factor; the other modes use 1 / scale_factor when one is given (scale_factor <= 0
// means none), else in / out. Computed in double, rounded once to T, as ATen does.
template <typename T>
inline AxisMap<T> make_axis_map(int64_t in_size, int64_t out_size, CoordinateMode mode,
                                double scale_factor) {
  T scale;
  if (mode == CoordinateMode::kAlignCorners) {
    scale = out_size > 1 ? static_cast<T>(in_size - 1) / static_cast<T>(out_size - 1) : T(0);
  } else if (scale_factor > 0) {
    scale = static_cast<T>(1.0 / scale_factor);
  } else {
    scale = static_cast<T>(in_size) / static_cast<T>(out_size);
  }
  const T shift = mode == CoordinateMode::kHalfPixel ? T(0.5) : T(0);
  return {static_cast<int>(in_size), static_cast<int>(out_size), scale, shift};
}

// Sizes of a resize whose tensors are dense in NCHW or NHWC order. An element is
// (plane, y, x, channel): NCHW has N*C planes and one channel, NHWC has N planes and C
// channels, so the same index arithmetic serves both layouts.
struct Geometry {
  int64_t planes;
  int64_t channels;
  int in_h, in_w, out_h, out_w;
};

}  // namespace resize_op
