#pragma once
// Bilinear resize: the coordinate math that the CPU and CUDA kernels both compile, so the
// two backends cannot drift. Per axis, output index d maps to the input coordinate
//   half_pixel     src = max((d + 0.5) * scale - 0.5, 0)   (PyTorch align_corners=False)
//   align_corners  src = d * scale, scale = (in - 1) / (out - 1)
//   asymmetric     src = d * scale                          (TensorFlow 1.x default)
// and reads the taps i0 = floor(src), i1 = min(i0 + 1, in - 1) with weights 1 - l, l,
// l = src - i0. The forms follow ATen's area_pixel_compute_scale/_source_index; the
// half-pixel product is one fused multiply-add because that is what ATen computes on
// both devices (nvcc and the AVX2 build of its CPU kernel contract it), so coordinates
// agree with F.interpolate bit for bit. Torch-free; included by the CPU kernels
// (resize_cpu.cpp) and the CUDA kernels (resize_cuda.cu) only: the host glue sees
// resize_types.h.
#include "common/host_device.h"
#include "common/std_lite.h"
#include "resize_types.h"

namespace resize_op {

template <typename T>
OPS_HOST_DEVICE T source_coordinate(const AxisMap<T>& axis, int dst) {
  const T src = std::fma(static_cast<T>(dst) + axis.shift, axis.scale, -axis.shift);
  return src > T(0) ? src : T(0);
}

// src >= 0, so truncation is floor; i0 is clamped (and l with it) against rounding past
// the last pixel, as ATen's CPU kernel does.
template <typename T>
OPS_HOST_DEVICE Taps<T> taps(const AxisMap<T>& axis, int dst) {
  const T src = source_coordinate(axis, dst);
  const int last = axis.in_size - 1;
  int i0 = static_cast<int>(src);
  i0 = i0 < last ? i0 : last;
  const T l = src - static_cast<T>(i0);
  return {i0, i0 < last ? i0 + 1 : last, l < T(1) ? l : T(1)};
}

// Weight with which output index d (taps t) reads input index i; 0 if it does not.
template <typename T>
OPS_HOST_DEVICE T tap_weight(const Taps<T>& t, int i) {
  return (t.i0 == i ? T(1) - t.l1 : T(0)) + (t.i1 == i ? t.l1 : T(0));
}

// The output indices that read input index i form one range [first_reader, end_reader):
// i0 and i1 never decrease with d, and d reads i exactly when i0 <= i <= i1. Each bound is
// the first d where a monotone predicate on taps(d) holds, found from the inverse of the
// coordinate formula as a guess, then corrected by stepping with the same taps() the
// forward uses, so the backward gathers exactly the pairs the forward read whatever the
// rounding (a guess off by k costs k steps; it is off by at most one but where the
// half-pixel clamp at 0 makes the formula flat).
template <typename T, typename Pred>
OPS_HOST_DEVICE int first_where(const AxisMap<T>& axis, T guess, Pred pred) {
  int d;
  if (!(guess > T(0))) {
    d = 0;
  } else if (!(guess < static_cast<T>(axis.out_size))) {
    d = axis.out_size;
  } else {
    d = static_cast<int>(guess);
    d += static_cast<T>(d) < guess ? 1 : 0;
  }
  while (d > 0 && pred(taps(axis, d - 1))) --d;
  while (d < axis.out_size && !pred(taps(axis, d))) ++d;
  return d;
}

// First d with i1 >= i, i.e. src >= i - 1.
template <typename T>
OPS_HOST_DEVICE int first_reader(const AxisMap<T>& axis, int i) {
  if (i <= 0) return 0;
  const T guess = (static_cast<T>(i - 1) + axis.shift) / axis.scale - axis.shift;
  return first_where(axis, guess, [i](const Taps<T>& t) { return t.i1 >= i; });
}

// First d with i0 > i, i.e. src >= i + 1; none reads past the last pixel.
template <typename T>
OPS_HOST_DEVICE int end_reader(const AxisMap<T>& axis, int i) {
  if (i >= axis.in_size - 1) return axis.out_size;
  const T guess = (static_cast<T>(i + 1) + axis.shift) / axis.scale - axis.shift;
  return first_where(axis, guess, [i](const Taps<T>& t) { return t.i0 > i; });
}

}  // namespace resize_op
