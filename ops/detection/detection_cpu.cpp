// Detection ops: the CPU kernels (declared in detection_cpu.h) over detection.h's math, with
// torchvision's semantics. A unit of its own: an edit of the schema or the host side
// compiles no kernel, and an edit of the math no host glue.
//
// NMS keeps torchvision's greedy order but works on the boxes copied into score order
// (contiguous, so the inner loop vectorises), resolves 64 candidates at a time and lets
// the kept ones of a step suppress all later boxes in parallel; suppressed boxes are
// squeezed out once they make up a quarter of the rest.
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "detection.h"
#include "detection_cpu.h"

namespace detection {
namespace {

// ---------------------------------------------------------------------------------------
// NMS
// ---------------------------------------------------------------------------------------

template <typename T>
struct SortedBoxes {
  std::vector<T> x1, y1, x2, y2, area;
  std::vector<int64_t> cls;   // empty without classes
  std::vector<int64_t> rank;  // position in score order

  void move(int64_t from, int64_t to) {
    x1[to] = x1[from];
    y1[to] = y1[from];
    x2[to] = x2[from];
    y2[to] = y2[from];
    area[to] = area[from];
    rank[to] = rank[from];
    if (!cls.empty()) cls[to] = cls[from];
  }
};

// Box i (kept) suppresses boxes [begin, end) that overlap it above the threshold.
template <typename T, typename Th, bool kClasses>
void suppress_range(const SortedBoxes<T>& b, int64_t i, int64_t begin, int64_t end, Th threshold,
                    uint8_t* flags) {
  const T ix1 = b.x1[i], iy1 = b.y1[i], ix2 = b.x2[i], iy2 = b.y2[i], iarea = b.area[i];
  const int64_t icls = kClasses ? b.cls[i] : 0;
  const T* x1 = b.x1.data();
  const T* y1 = b.y1.data();
  const T* x2 = b.x2.data();
  const T* y2 = b.y2.data();
  const T* area = b.area.data();
  const int64_t* cls = b.cls.data();
  for (int64_t j = begin; j < end; ++j) {
    const bool above = cpu_iou_above(ix1, iy1, ix2, iy2, iarea, x1[j], y1[j], x2[j],
                                                y2[j], area[j], threshold);
    const bool same = kClasses ? cls[j] == icls : true;
    flags[j] |= static_cast<uint8_t>(above & same);
  }
}

template <typename T, typename Th, bool kClasses>
int64_t greedy_nms(SortedBoxes<T>& b, Th threshold, const int64_t* order, int64_t* keep) {
  const int64_t n = static_cast<int64_t>(b.x1.size());
  std::vector<uint8_t> flags(n, 0);
  int64_t alive = n;
  int64_t cursor = 0;
  int64_t num_kept = 0;
  std::vector<int64_t> kept_here;
  kept_here.reserve(kNmsBlock);
  while (cursor < alive) {
    const int64_t step_end = std::min<int64_t>(cursor + kNmsBlock, alive);
    kept_here.clear();
    for (int64_t i = cursor; i < step_end; ++i) {
      if (flags[i]) continue;
      keep[num_kept++] = order[b.rank[i]];
      kept_here.push_back(i);
      suppress_range<T, Th, kClasses>(b, i, i + 1, step_end, threshold, flags.data());
    }
    cursor = step_end;
    if (kept_here.empty() || cursor >= alive) continue;
    // Threads only pay off for large steps: a parallel region per 64 candidates costs
    // more than the comparisons of a small step (about a nanosecond each).
    const int64_t pairs = static_cast<int64_t>(kept_here.size()) * (alive - cursor);
    const int64_t grain = pairs >= (int64_t(1) << 21) ? std::max<int64_t>(4096, (alive - cursor) / 64)
                                                      : alive - cursor;
    torch::stable::parallel_for(cursor, alive, grain, [&](int64_t begin, int64_t end) {
      for (const int64_t i : kept_here) {
        suppress_range<T, Th, kClasses>(b, i, begin, end, threshold, flags.data());
      }
    });
    int64_t removed = 0;
    for (int64_t j = cursor; j < alive; ++j) removed += flags[j];
    if (4 * removed >= alive - cursor) {
      int64_t out = cursor;
      for (int64_t j = cursor; j < alive; ++j) {
        if (flags[j]) continue;
        b.move(j, out);
        flags[out++] = 0;
      }
      alive = out;
    }
  }
  return num_kept;
}

}  // namespace

template <typename T>
int64_t nms_cpu_kernel(const T* boxes_sorted, const int64_t* classes_sorted,
                       const int64_t* order, int64_t n, double iou_threshold, int64_t* keep) {
  SortedBoxes<T> b;
  for (auto* v : {&b.x1, &b.y1, &b.x2, &b.y2, &b.area}) v->resize(n);
  b.rank.resize(n);
  const T* p = boxes_sorted;
  for (int64_t i = 0; i < n; ++i) {
    b.x1[i] = p[4 * i];
    b.y1[i] = p[4 * i + 1];
    b.x2[i] = p[4 * i + 2];
    b.y2[i] = p[4 * i + 3];
    b.area[i] = (b.x2[i] - b.x1[i]) * (b.y2[i] - b.y1[i]);
    b.rank[i] = i;
  }
  const bool with_classes = classes_sorted != nullptr;
  if (with_classes) b.cls.assign(classes_sorted, classes_sorted + n);
  if constexpr (std::is_same_v<T, float>) {
    const float threshold = float_threshold_below(iou_threshold);
    return with_classes ? greedy_nms<T, float, true>(b, threshold, order, keep)
                        : greedy_nms<T, float, false>(b, threshold, order, keep);
  } else {
    return with_classes ? greedy_nms<T, double, true>(b, iou_threshold, order, keep)
                        : greedy_nms<T, double, false>(b, iou_threshold, order, keep);
  }
}

template int64_t nms_cpu_kernel<float>(const float*, const int64_t*, const int64_t*, int64_t,
                                       double, int64_t*);
template int64_t nms_cpu_kernel<double>(const double*, const int64_t*, const int64_t*, int64_t,
                                        double, int64_t*);

// ---------------------------------------------------------------------------------------
// ROIAlign
// ---------------------------------------------------------------------------------------

namespace {

// Sampling points of one roi along one axis: bin-major, `grid` samples per bin.
template <typename A>
struct AxisSamples {
  std::vector<int> low, high;
  std::vector<A> w_low, w_high;
  std::vector<uint8_t> valid;

  void fill(const RoiAxis<A>& ax, int pooled, int size) {
    const size_t count = size_t(pooled) * size_t(ax.grid);
    low.resize(count);
    high.resize(count);
    w_low.resize(count);
    w_high.resize(count);
    valid.resize(count);
    for (int p = 0; p < pooled; ++p) {
      for (int i = 0; i < ax.grid; ++i) {
        const size_t s = size_t(p) * ax.grid + i;
        valid[s] = axis_weights(sample_position(ax, p, i), size, low[s], high[s], w_low[s],
                                w_high[s]);
      }
    }
  }
};

// The samples of one roi, both axes, computed once per roi for all its channels.
template <typename A>
struct RoiSamples {
  RoiAxes<A> axes;
  AxisSamples<A> ys, xs;
  int64_t width;

  void fill(const A* roi, A scale, const RoiAlignParams& p) {
    axes = roi_axes(roi, scale, p);
    width = p.width;
    ys.fill(axes.y, p.pooled_height, static_cast<int>(p.height));
    xs.fill(axes.x, p.pooled_width, static_cast<int>(p.width));
  }

  int samples() const { return axes.y.grid * axes.x.grid; }

  // f(o1, o2, o3, o4, w1, w2, w3, w4) for every sample of bin (ph, pw) inside the map:
  // the offsets in a plane of its four neighbours (top left, top right, bottom left, bottom
  // right) and their bilinear weights.
  template <typename F>
  void for_each(int ph, int pw, F&& f) const {
    for (int iy = 0; iy < axes.y.grid; ++iy) {
      const size_t sy = size_t(ph) * axes.y.grid + iy;
      if (!ys.valid[sy]) continue;
      const int64_t r0 = int64_t(ys.low[sy]) * width, r1 = int64_t(ys.high[sy]) * width;
      for (int ix = 0; ix < axes.x.grid; ++ix) {
        const size_t sx = size_t(pw) * axes.x.grid + ix;
        if (!xs.valid[sx]) continue;
        const int x0 = xs.low[sx], x1 = xs.high[sx];
        f(r0 + x0, r0 + x1, r1 + x0, r1 + x1, ys.w_low[sy] * xs.w_low[sx],
          ys.w_low[sy] * xs.w_high[sx], ys.w_high[sy] * xs.w_low[sx],
          ys.w_high[sy] * xs.w_high[sx]);
      }
    }
  }
};

// Items per thread so that each carries at least ~64k bins of work: small calls (gradcheck,
// a few rois) run inline instead of paying for a parallel region.
inline int64_t grain_for(int64_t bins_per_item) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, bins_per_item));
}

}  // namespace

template <typename T, typename A>
void roi_align_forward_cpu_kernel(const T* input, const A* rois, const int64_t* batches,
                                  const RoiAlignParams& p, T* output) {
  const int64_t plane = p.height * p.width;
  const int64_t bins = int64_t(p.pooled_height) * p.pooled_width;
  const A scale = static_cast<A>(p.spatial_scale);
  torch::stable::parallel_for(0, p.num_rois, grain_for(p.channels * bins), [&](int64_t begin, int64_t end) {
    RoiSamples<A> roi;
    for (int64_t r = begin; r < end; ++r) {
      roi.fill(rois + r * 5, scale, p);
      const A count = static_cast<A>(std::max(roi.samples(), 1));
      for (int64_t c = 0; c < p.channels; ++c) {
        const T* in = input + (batches[r] * p.channels + c) * plane;
        T* out = output + (r * p.channels + c) * bins;
        for (int ph = 0; ph < p.pooled_height; ++ph) {
          for (int pw = 0; pw < p.pooled_width; ++pw) {
            A acc = 0;
            roi.for_each(ph, pw, [&](int64_t o1, int64_t o2, int64_t o3, int64_t o4, A w1, A w2,
                                     A w3, A w4) {
              acc += w1 * static_cast<A>(in[o1]) + w2 * static_cast<A>(in[o2]) +
                     w3 * static_cast<A>(in[o3]) + w4 * static_cast<A>(in[o4]);
            });
            out[int64_t(ph) * p.pooled_width + pw] = static_cast<T>(acc / count);
          }
        }
      }
    }
  });
}

// Scatter of the forward's weights, parallel over channels: each thread owns whole
// gradient planes, so no two threads add to one element and the result is deterministic.
template <typename T, typename A>
void roi_align_backward_cpu_kernel(const T* grad, const A* rois, const int64_t* batches,
                                   const RoiAlignParams& p, A* grad_input) {
  const int64_t plane = p.height * p.width;
  const int64_t bins = int64_t(p.pooled_height) * p.pooled_width;
  const A scale = static_cast<A>(p.spatial_scale);
  torch::stable::parallel_for(0, p.channels, grain_for(p.num_rois * bins), [&](int64_t c_begin, int64_t c_end) {
    RoiSamples<A> roi;
    for (int64_t r = 0; r < p.num_rois; ++r) {
      roi.fill(rois + r * 5, scale, p);
      if (roi.axes.y.grid <= 0 || roi.axes.x.grid <= 0) continue;
      const A count = static_cast<A>(roi.samples());
      for (int64_t c = c_begin; c < c_end; ++c) {
        const T* g = grad + (r * p.channels + c) * bins;
        A* out = grad_input + (batches[r] * p.channels + c) * plane;
        for (int ph = 0; ph < p.pooled_height; ++ph) {
          for (int pw = 0; pw < p.pooled_width; ++pw) {
            const A gv = static_cast<A>(g[int64_t(ph) * p.pooled_width + pw]) / count;
            roi.for_each(ph, pw, [&](int64_t o1, int64_t o2, int64_t o3, int64_t o4, A w1, A w2,
                                     A w3, A w4) {
              out[o1] += w1 * gv;
              out[o2] += w2 * gv;
              out[o3] += w3 * gv;
              out[o4] += w4 * gv;
            });
          }
        }
      }
    }
  });
}

#define DETECTION_INSTANTIATE_CPU(T, A)                                                    \
  template void roi_align_forward_cpu_kernel<T, A>(const T*, const A*, const int64_t*,    \
                                                   const RoiAlignParams&, T*);            \
  template void roi_align_backward_cpu_kernel<T, A>(const T*, const A*, const int64_t*,   \
                                                    const RoiAlignParams&, A*);
DETECTION_INSTANTIATE_CPU(float, float)
DETECTION_INSTANTIATE_CPU(double, double)
DETECTION_INSTANTIATE_CPU(c10::Half, float)
DETECTION_INSTANTIATE_CPU(c10::BFloat16, float)
#undef DETECTION_INSTANTIATE_CPU

}  // namespace detection
