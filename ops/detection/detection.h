#pragma once
// Detection math shared by the CPU kernels (detection_cpu.cpp) and the CUDA kernels
// (detection_cuda.cu); torch-free, so the .cu includes it.
// Box overlap of NMS and the sampling geometry of ROIAlign live here once, so the two
// backends cannot drift apart.
#include <cmath>

#include "common/host_device.h"
#include "detection_types.h"

namespace detection {

// ---------------------------------------------------------------------------------------
// NMS
// ---------------------------------------------------------------------------------------

// std::max / std::min as torchvision's CPU kernel applies them: with a NaN argument they
// return their first argument, which decides what a NaN coordinate does.
template <typename T> OPS_HOST_DEVICE T first_max(T a, T b) { return (a < b) ? b : a; }
template <typename T> OPS_HOST_DEVICE T first_min(T a, T b) { return (b < a) ? b : a; }

// IoU test of the CPU kernel, term for term as torchvision computes it (scalar_t
// arithmetic, areas precomputed as (x2 - x1) * (y2 - y1), compared in double; a float
// threshold from float_threshold_below gives the same answers for float boxes).
template <typename T, typename Th>
OPS_HOST_DEVICE bool cpu_iou_above(T ix1, T iy1, T ix2, T iy2, T iarea, T jx1, T jy1, T jx2,
                                   T jy2, T jarea, Th threshold) {
  const T xx1 = first_max(ix1, jx1);
  const T yy1 = first_max(iy1, jy1);
  const T xx2 = first_min(ix2, jx2);
  const T yy2 = first_min(iy2, jy2);
  const T w = first_max(static_cast<T>(0), xx2 - xx1);
  const T h = first_max(static_cast<T>(0), yy2 - yy1);
  const T inter = w * h;
  const T ovr = inter / (iarea + jarea - inter);
  return ovr > threshold;
}

// The float threshold t with (f > t) == (double(f) > threshold) for every float f, so the
// CPU inner loop compares floats and vectorises: the largest float not above threshold.
inline float float_threshold_below(double threshold) {
  float t = static_cast<float>(threshold);
  if (static_cast<double>(t) > threshold) t = std::nextafter(t, -INFINITY);
  return t;
}

// ---------------------------------------------------------------------------------------
// ROIAlign
// ---------------------------------------------------------------------------------------

// Where one roi samples the feature map, along one axis (rows or columns). Bin p covers
// [start + p * bin, start + (p + 1) * bin) and is sampled at `grid` evenly spaced points.
template <typename A>
struct RoiAxis {
  A start;
  A bin;
  int grid;
};

// The most samples per bin along an axis of `size` pixels when sampling_ratio <= 0. Samples
// count on [-1, size], so a bin longer than size + 2 pixels is larger than the whole map:
// torchvision samples it ceil(bin) times per axis, and a diverged box such as
// [0, 0, 1e9, 1e9] would need 1e16 samples per bin. A bin up to size + 2 pixels long (any
// roi up to output_size times the map plus a pixel each side) is sampled exactly as
// torchvision does; a longer one is sampled at size + 2 evenly spaced points per axis, the
// same average over the bin at fewer points, so one roi costs at most output_size^2 passes
// over the map.
OPS_HOST_DEVICE int max_adaptive_grid(int size) { return size + 2; }

// The roi's axis from its two corners (torchvision's convention): with aligned=True the
// pixel centres are shifted by half a pixel; with aligned=False a roi is at least one pixel
// long. sampling_ratio <= 0 means ceil(bin) samples per bin, at most
// max_adaptive_grid(size) (none for empty or non-finite rois: those sample nothing and
// give zeros). `size` is the map's length along this axis.
template <typename A>
OPS_HOST_DEVICE RoiAxis<A> roi_axis(A lo, A hi, A spatial_scale, int pooled, int sampling_ratio,
                                    bool aligned, int size) {
  const A offset = aligned ? static_cast<A>(0.5) : static_cast<A>(0);
  RoiAxis<A> ax;
  ax.start = lo * spatial_scale - offset;
  A length = hi * spatial_scale - offset - ax.start;
  if (!aligned) length = length > static_cast<A>(1) ? length : static_cast<A>(1);
  ax.bin = length / static_cast<A>(pooled);
  if (sampling_ratio > 0) {
    ax.grid = sampling_ratio;
  } else {
    const A g = ceil(ax.bin);
    const int cap = max_adaptive_grid(size);
    // g - g is 0 only for a finite g: a NaN or infinite roi samples nothing.
    if (!(g > static_cast<A>(0) && g - g == static_cast<A>(0))) {
      ax.grid = 0;
    } else {
      ax.grid = g < static_cast<A>(cap) ? static_cast<int>(g) : cap;
    }
  }
  return ax;
}

// Both axes of one roi (batch index, x1, y1, x2, y2) of a call: rows from y1 and y2,
// columns from x1 and x2. spatial_scale is p.spatial_scale in the accumulation type A,
// converted once per kernel rather than once per roi.
template <typename A>
struct RoiAxes {
  RoiAxis<A> y, x;
};

template <typename A>
OPS_HOST_DEVICE RoiAxes<A> roi_axes(const A* roi, A spatial_scale, const RoiAlignParams& p) {
  return {roi_axis(roi[2], roi[4], spatial_scale, p.pooled_height, p.sampling_ratio, p.aligned,
                   static_cast<int>(p.height)),
          roi_axis(roi[1], roi[3], spatial_scale, p.pooled_width, p.sampling_ratio, p.aligned,
                   static_cast<int>(p.width))};
}

// Position of sample i of bin p (the same expression in forward and backward).
template <typename A>
OPS_HOST_DEVICE A sample_position(const RoiAxis<A>& ax, int p, int i) {
  return ax.start + static_cast<A>(p) * ax.bin +
         static_cast<A>(static_cast<A>(i) + static_cast<A>(0.5)) * ax.bin / static_cast<A>(ax.grid);
}

// Linear interpolation weights of a sample at y on an axis of `size` pixels, as
// torchvision's bilinear_interpolate does per axis: samples beyond one pixel outside the
// map (or at a non-finite position) count zero; others are clamped to the border.
// Returns false for a sample that counts zero.
template <typename A>
OPS_HOST_DEVICE bool axis_weights(A y, int size, int& low, int& high, A& w_low, A& w_high) {
  if (!(y >= static_cast<A>(-1) && y <= static_cast<A>(size))) return false;
  if (y <= static_cast<A>(0)) y = static_cast<A>(0);
  low = static_cast<int>(y);
  if (low >= size - 1) {
    high = low = size - 1;
    y = static_cast<A>(low);
  } else {
    high = low + 1;
  }
  const A l = y - static_cast<A>(low);
  w_low = static_cast<A>(1) - l;
  w_high = l;
  return true;
}

// Total weight with which bin p of an axis pulls from pixel `pixel` (sum over the bin's
// samples; the two corner weights of a clamped sample both land on the border pixel).
// The backward's gather uses it: a pixel's gradient is the sum over bins of
// weight_y * weight_x * grad. Bins far from the pixel are skipped without sampling.
template <typename A>
OPS_HOST_DEVICE A bin_pixel_weight(const RoiAxis<A>& ax, int p, int pixel, int size) {
  const A a = ax.start + static_cast<A>(p) * ax.bin;
  const A b = a + ax.bin;
  const A lo = a < b ? a : b;
  const A hi = a < b ? b : a;
  // A sample reaches pixel h only from (h - 1, h + 1), or from up to one pixel outside the
  // map for the border pixels; a margin of one more pixel absorbs rounding.
  const A fp = static_cast<A>(pixel);
  if (!(hi >= fp - static_cast<A>(2) && lo <= fp + static_cast<A>(2))) return static_cast<A>(0);
  A total = static_cast<A>(0);
  for (int i = 0; i < ax.grid; ++i) {
    int low, high;
    A w_low, w_high;
    if (!axis_weights(sample_position(ax, p, i), size, low, high, w_low, w_high)) continue;
    if (low == pixel) total += w_low;
    if (high == pixel) total += w_high;
  }
  return total;
}

// Bins of an axis that can reach a pixel of [p0, p1]: a range [lo, hi] (empty when
// lo > hi) that contains every bin whose span comes within two pixels of one of them
// (samples reach one pixel), maybe a few more.
template <typename A>
OPS_HOST_DEVICE void bin_range(const RoiAxis<A>& ax, int p0, int p1, int pooled, int& lo,
                               int& hi) {
  lo = 0;
  hi = -1;
  const A a = static_cast<A>(p0) - static_cast<A>(2), b = static_cast<A>(p1) + static_cast<A>(2);
  if (ax.bin == static_cast<A>(0)) {
    if (ax.start >= a && ax.start <= b) hi = pooled - 1;
    return;
  }
  const A u0 = (a - ax.start) / ax.bin, u1 = (b - ax.start) / ax.bin;
  A l = floor(u0 < u1 ? u0 : u1) - static_cast<A>(1);
  A h = floor(u0 < u1 ? u1 : u0);
  if (!(l <= h)) return;  // NaN
  l = l > static_cast<A>(0) ? l : static_cast<A>(0);
  h = h < static_cast<A>(pooled - 1) ? h : static_cast<A>(pooled - 1);
  if (l > h) return;
  lo = static_cast<int>(l);
  hi = static_cast<int>(h);
}

}  // namespace detection
