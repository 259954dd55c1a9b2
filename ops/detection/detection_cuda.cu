// Detection ops: CUDA kernels (torch-free; the host side is detection_cuda.cpp).
//
// NMS: an overlap bitmask over the score-sorted boxes (torchvision's layout: 64 boxes per
// word), then one block reduces the mask on the device, 64 candidates per step: one thread
// resolves the step's candidates against each other, then all threads OR the rows of the
// kept ones into the suppression words of the later steps. No mask leaves the device.
//
// ROIAlign: the forward reads each sample's four neighbours for a chunk of channels per
// thread, so the sampling geometry is computed once per chunk instead of once per channel.
// The backward is a gather, so every gradient element is written once, without atomics,
// and the result is deterministic: a block owns a tile of pixels and a group of channels,
// lists the rois that reach the tile, and sums them in index order with the tile's
// separable weights in shared memory (a per-pixel variant remains for outputs too large
// for those weights).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_convert.cuh"
#include "common/launch.h"
#include "detection.h"
#include "detection_cuda.h"

namespace detection {

using ops_common::acc_t;
using ops_common::from_acc;
using ops_common::to_acc;

namespace {

// ---------------------------------------------------------------------------------------
// NMS
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ float vmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float vmin(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double vmax(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ double vmin(double a, double b) { return fmin(a, b); }

// torchvision's CUDA kernel keeps the widths and one side of each area in the storage
// type: reproduce its rounding for 16-bit boxes so that kept indices agree exactly.
template <typename T> __device__ __forceinline__ acc_t<T> stored(acc_t<T> v) {
  return ops_common::to_acc(ops_common::from_acc<T>(v));
}

// The overlap test of torchvision's CUDA kernel, operation for operation (fmax/fmin ignore
// a NaN coordinate here, unlike the CPU kernel's std::max).
template <typename T>
__device__ __forceinline__ bool iou_above(const acc_t<T>* a, const acc_t<T>* b, float threshold) {
  using A = acc_t<T>;
  const A left = vmax(a[0], b[0]), right = vmin(a[2], b[2]);
  const A top = vmax(a[1], b[1]), bottom = vmin(a[3], b[3]);
  const A width = vmax(stored<T>(right - left), A(0)), height = vmax(stored<T>(bottom - top), A(0));
  const A inter = width * height;
  const A area_a = (a[2] - a[0]) * stored<T>(a[3] - a[1]);
  const A area_b = (b[2] - b[0]) * stored<T>(b[3] - b[1]);
  return (inter / (area_a + area_b - inter)) > threshold;
}

// Block (col, row) compares the 64 boxes of row block `row` with those of column block
// `col`; only col >= row is needed (later boxes), and on the diagonal only j > i.
template <typename T>
__global__ void nms_mask_kernel(const T* __restrict__ boxes, const int64_t* __restrict__ classes,
                                int64_t n, int col_blocks, float threshold,
                                unsigned long long* __restrict__ mask) {
  using A = acc_t<T>;
  __shared__ A col_boxes[kNmsBlock * 4];
  __shared__ int64_t col_classes[kNmsBlock];
  const int col = blockIdx.x;
  const int64_t col_begin = int64_t(col) * kNmsBlock;
  const int col_size = static_cast<int>(n - col_begin < kNmsBlock ? n - col_begin : kNmsBlock);
  if (threadIdx.x < col_size) {
    const int64_t j = col_begin + threadIdx.x;
    for (int k = 0; k < 4; ++k) col_boxes[threadIdx.x * 4 + k] = to_acc(boxes[j * 4 + k]);
    if (classes != nullptr) col_classes[threadIdx.x] = classes[j];
  }
  __syncthreads();
  for (int row = blockIdx.y; row <= col; row += gridDim.y) {
    const int64_t i = int64_t(row) * kNmsBlock + threadIdx.x;
    if (i >= n) continue;
    A box[4];
    for (int k = 0; k < 4; ++k) box[k] = to_acc(boxes[i * 4 + k]);
    const int64_t cls = classes != nullptr ? classes[i] : 0;
    const int start = (row == col) ? static_cast<int>(threadIdx.x) + 1 : 0;
    unsigned long long bits = 0;
    for (int j = start; j < col_size; ++j) {
      if ((classes == nullptr || col_classes[j] == cls) &&
          iou_above<T>(box, col_boxes + j * 4, threshold)) {
        bits |= 1ULL << j;
      }
    }
    mask[i * col_blocks + col] = bits;
  }
}

__global__ void nms_reduce_kernel(const unsigned long long* __restrict__ mask,
                                  const int64_t* __restrict__ order, int64_t n, int col_blocks,
                                  int64_t* __restrict__ keep, int64_t* __restrict__ num_kept) {
  extern __shared__ unsigned long long removed[];
  __shared__ unsigned long long diagonal[kNmsBlock];
  __shared__ int kept_list[kNmsBlock];
  __shared__ int kept_here;
  const int tid = threadIdx.x;
  for (int j = tid; j < col_blocks; j += blockDim.x) removed[j] = 0;
  int64_t count = 0;
  __syncthreads();
  for (int nb = 0; nb < col_blocks; ++nb) {
    const int64_t base = int64_t(nb) * kNmsBlock;
    const int size = static_cast<int>(n - base < kNmsBlock ? n - base : kNmsBlock);
    if (tid < size) diagonal[tid] = mask[(base + tid) * col_blocks + nb];
    __syncthreads();
    if (tid == 0) {
      // Greedy within the step: visit only candidates not yet removed.
      const unsigned long long valid = size == 64 ? ~0ULL : ((1ULL << size) - 1);
      unsigned long long removed_here = removed[nb];
      unsigned long long open = valid & ~removed_here;
      int kept = 0;
      while (open) {
        const int ib = __ffsll(static_cast<long long>(open)) - 1;
        kept_list[kept++] = ib;
        removed_here |= diagonal[ib];
        open = valid & ~removed_here & ~((2ULL << ib) - 1);
      }
      kept_here = kept;
    }
    __syncthreads();
    const int kept = kept_here;
    if (tid < kept) keep[count + tid] = order[base + kept_list[tid]];
    // The kept rows suppress the later steps: one (kept row, word) pair per thread and
    // round, four loads in flight before the shared-memory ORs.
    const int cols = col_blocks - nb - 1;
    const int64_t items = int64_t(kept) * cols;
    const int stride = blockDim.x;
    for (int64_t first = tid; first < items; first += 4 * int64_t(stride)) {
      unsigned long long v[4];
      int col[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t it = first + int64_t(u) * stride;
        v[u] = 0;
        col[u] = 0;
        if (it < items) {
          const int k = static_cast<int>(it / cols);
          col[u] = nb + 1 + static_cast<int>(it - int64_t(k) * cols);
          v[u] = mask[(base + kept_list[k]) * col_blocks + col[u]];
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (v[u]) atomicOr(&removed[col[u]], v[u]);
      }
    }
    count += kept;
    __syncthreads();
  }
  if (tid == 0) *num_kept = count;
}

// ---------------------------------------------------------------------------------------
// ROIAlign
// ---------------------------------------------------------------------------------------

constexpr int kForwardChannels = 4;
constexpr int kBackwardChannels = 32;
constexpr int kRowsPerBlock = 8;
constexpr int kCachedBins = 4;

// The roi's batch index as torchvision reads it (truncation); -1 when it names no image
// of the batch (such rois give zeros: checking on the host would cost a sync).
template <typename A>
__device__ __forceinline__ int64_t roi_batch(A b, int64_t batch) {
  return (b >= A(0) && b < static_cast<A>(batch)) ? static_cast<int64_t>(b) : -1;
}

// The kernels take RoiAlignParams's fields as parameters of their own (the launchers
// unpack the block): with the struct as a kernel parameter ptxas allocated the tiled
// backward's registers differently, with spills where there were none.
template <typename T, int CB>
__global__ void roi_align_forward_kernel(const T* __restrict__ input, const acc_t<T>* __restrict__ rois,
                                         int64_t num_rois, int64_t batch, int64_t channels,
                                         int64_t height, int64_t width, int pooled_height,
                                         int pooled_width, acc_t<T> spatial_scale,
                                         int sampling_ratio, bool aligned, T* __restrict__ output) {
  using A = acc_t<T>;
  const int64_t chunks = (channels + CB - 1) / CB;
  const int64_t total = num_rois * chunks * pooled_height * pooled_width;
  const int64_t plane = height * width;
  const int H = static_cast<int>(height), W = static_cast<int>(width);
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int pw = static_cast<int>(idx % pooled_width);
    int64_t t = idx / pooled_width;
    const int ph = static_cast<int>(t % pooled_height);
    t /= pooled_height;
    const int64_t c0 = (t % chunks) * CB;
    const int64_t r = t / chunks;
    const A* roi = rois + r * 5;
    const RoiAxis<A> ry = roi_axis(roi[2], roi[4], spatial_scale, pooled_height, sampling_ratio, aligned, H);
    const RoiAxis<A> rx = roi_axis(roi[1], roi[3], spatial_scale, pooled_width, sampling_ratio, aligned, W);
    const int64_t n = roi_batch(roi[0], batch);
    A acc[CB];
#pragma unroll
    for (int k = 0; k < CB; ++k) acc[k] = A(0);
    if (n >= 0) {
      const T* base = input + (n * channels + c0) * plane;
      for (int iy = 0; iy < ry.grid; ++iy) {
        int y0, y1;
        A wy0, wy1;
        if (!axis_weights(sample_position(ry, ph, iy), H, y0, y1, wy0, wy1)) continue;
        for (int ix = 0; ix < rx.grid; ++ix) {
          int x0, x1;
          A wx0, wx1;
          if (!axis_weights(sample_position(rx, pw, ix), W, x0, x1, wx0, wx1)) continue;
          const A w1 = wy0 * wx0, w2 = wy0 * wx1, w3 = wy1 * wx0, w4 = wy1 * wx1;
          const int64_t o1 = int64_t(y0) * W + x0, o2 = int64_t(y0) * W + x1;
          const int64_t o3 = int64_t(y1) * W + x0, o4 = int64_t(y1) * W + x1;
#pragma unroll
          for (int k = 0; k < CB; ++k) {
            if (c0 + k < channels) {
              const T* p = base + k * plane;
              acc[k] += w1 * to_acc(p[o1]) + w2 * to_acc(p[o2]) + w3 * to_acc(p[o3]) +
                        w4 * to_acc(p[o4]);
            }
          }
        }
      }
    }
    const int samples = ry.grid * rx.grid;
    const A count = static_cast<A>(samples > 1 ? samples : 1);
    const int64_t bins = int64_t(pooled_height) * pooled_width;
    T* out = output + (r * channels + c0) * bins + int64_t(ph) * pooled_width + pw;
#pragma unroll
    for (int k = 0; k < CB; ++k) {
      if (c0 + k < channels) out[k * bins] = from_acc<T>(acc[k] / count);
    }
  }
}

template <typename A>
__device__ __forceinline__ RoiAxis<A> shfl_axis(const RoiAxis<A>& ax, int src) {
  RoiAxis<A> out;
  out.start = __shfl_sync(0xffffffffu, ax.start, src);
  out.bin = __shfl_sync(0xffffffffu, ax.bin, src);
  out.grid = __shfl_sync(0xffffffffu, ax.grid, src);
  return out;
}

// Block: 8 warps = 8 rows x 32 columns of one image, for CB channels; grid.z walks
// (image, channel chunk). Each warp tests 32 rois at a time against its row segment and
// then processes the hits one by one (geometry broadcast by shuffles).
template <typename T, int CB>
__global__ void roi_align_backward_kernel(const T* __restrict__ grad, const acc_t<T>* __restrict__ rois,
                                          int64_t num_rois, int64_t batch, int64_t channels,
                                          int64_t height, int64_t width, int pooled_height,
                                          int pooled_width, acc_t<T> spatial_scale,
                                          int sampling_ratio, bool aligned,
                                          T* __restrict__ grad_input) {
  using A = acc_t<T>;
  const int H = static_cast<int>(height), W = static_cast<int>(width);
  const int lane = threadIdx.x;
  const int h = blockIdx.y * kRowsPerBlock + threadIdx.y;
  if (h >= H) return;  // whole warp
  const int w0 = blockIdx.x * 32;
  const int w = w0 + lane;
  const bool inside = w < W;
  const A fh = static_cast<A>(h);
  const A fw_first = static_cast<A>(w0);
  const A fw_last = static_cast<A>(min(w0 + 31, W - 1));
  const int64_t chunks = (channels + CB - 1) / CB;
  const int64_t bins = int64_t(pooled_height) * pooled_width;
  for (int64_t z = blockIdx.z; z < batch * chunks; z += gridDim.z) {
    const int64_t n = z / chunks;
    const int64_t c0 = (z % chunks) * CB;
    A acc[CB];
#pragma unroll
    for (int k = 0; k < CB; ++k) acc[k] = A(0);
    for (int64_t r0 = 0; r0 < num_rois; r0 += 32) {
      const int64_t r = r0 + lane;
      RoiAxis<A> ry{A(0), A(0), 0}, rx{A(0), A(0), 0};
      A inv_count = A(0);
      bool hit = false;
      if (r < num_rois) {
        const A* roi = rois + r * 5;
        if (roi_batch(roi[0], batch) == n) {
          ry = roi_axis(roi[2], roi[4], spatial_scale, pooled_height, sampling_ratio, aligned, H);
          rx = roi_axis(roi[1], roi[3], spatial_scale, pooled_width, sampling_ratio, aligned, W);
          const A ya = ry.start, yb = ry.start + static_cast<A>(pooled_height) * ry.bin;
          const A xa = rx.start, xb = rx.start + static_cast<A>(pooled_width) * rx.bin;
          const A ylo = ya < yb ? ya : yb, yhi = ya < yb ? yb : ya;
          const A xlo = xa < xb ? xa : xb, xhi = xa < xb ? xb : xa;
          // Samples reach at most one pixel (plus rounding) beyond their span.
          hit = ry.grid > 0 && rx.grid > 0 && fh >= ylo - A(2) && fh <= yhi + A(2) &&
                fw_last >= xlo - A(2) && fw_first <= xhi + A(2);
          inv_count = A(1) / static_cast<A>(ry.grid * rx.grid);
        }
      }
      unsigned hits = __ballot_sync(0xffffffffu, hit);
      while (hits) {
        const int src = __ffs(hits) - 1;
        hits &= hits - 1;
        const RoiAxis<A> gy = shfl_axis(ry, src);
        const RoiAxis<A> gx = shfl_axis(rx, src);
        const A scale = __shfl_sync(0xffffffffu, inv_count, src);
        const T* g = grad + ((r0 + src) * channels + c0) * bins;
        // Only the bins near this row (warp-uniform) and near each lane's column are
        // visited, so the lanes of a warp stay in step.
        int ph_lo, ph_hi, pw_lo, pw_hi;
        bin_range(gy, h, h, pooled_height, ph_lo, ph_hi);
        bin_range(gx, w, w, pooled_width, pw_lo, pw_hi);
        if (!inside) pw_hi = pw_lo - 1;
        // The column weights of the first kCachedBins bins of the lane's range are computed
        // once per roi, not once per row bin.
        A wx_cached[kCachedBins];
#pragma unroll
        for (int t = 0; t < kCachedBins; ++t) {
          wx_cached[t] = pw_lo + t <= pw_hi ? bin_pixel_weight(gx, pw_lo + t, w, W) : A(0);
        }
        for (int ph = ph_lo; ph <= ph_hi; ++ph) {
          A wy = bin_pixel_weight(gy, ph, h, H);
          if (wy == A(0)) continue;
          wy *= scale;
          const T* g_row = g + int64_t(ph) * pooled_width;
#pragma unroll
          for (int t = 0; t < kCachedBins; ++t) {
            if (wx_cached[t] == A(0)) continue;
            const A a = wy * wx_cached[t];
            const T* gp = g_row + pw_lo + t;
#pragma unroll
            for (int k = 0; k < CB; ++k) {
              if (c0 + k < channels) acc[k] += a * to_acc(gp[k * bins]);
            }
          }
          for (int pw = pw_lo + kCachedBins; pw <= pw_hi; ++pw) {
            const A wx = bin_pixel_weight(gx, pw, w, W);
            if (wx == A(0)) continue;
            const A a = wy * wx;
            const T* gp = g_row + pw;
#pragma unroll
            for (int k = 0; k < CB; ++k) {
              if (c0 + k < channels) acc[k] += a * to_acc(gp[k * bins]);
            }
          }
        }
      }
    }
    if (inside) {
      T* out = grad_input + ((n * channels + c0) * height + h) * width + w;
#pragma unroll
      for (int k = 0; k < CB; ++k) {
        if (c0 + k < channels) out[k * height * width] = from_acc<T>(acc[k]);
      }
    }
  }
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Backward as a tiled gather. A block owns a tile of 8 rows x TW columns of one image and
// 32 * CPT channels (lane l holds channels l * CPT .. l * CPT + CPT - 1): it lists the rois
// of its image that reach the tile (in index order), and for each one puts the separable
// weights of the tile's rows and columns against the roi's bins in shared memory (computed
// once for all channels), then every warp adds the bins near its row: one coalesced load
// of CPT channels of grad (transposed to (K, PH, PW, C)) per bin, TW x CPT FMAs. Each
// gradient element is summed by one thread in a fixed order: no atomics, deterministic.
constexpr int kTileRows = 8;

template <typename T, int TW, int CPT, bool VEC>
__global__ void __launch_bounds__(256)
    roi_align_backward_tiles_kernel(const T* __restrict__ grad_t, const acc_t<T>* __restrict__ rois,
                                    int64_t num_rois, int64_t batch, int64_t channels, int H, int W,
                                    int pooled_height, int pooled_width, acc_t<T> spatial_scale,
                                    int sampling_ratio, bool aligned, T* __restrict__ grad_input) {
  using A = acc_t<T>;
  constexpr int kThreads = 32 * kTileRows;
  constexpr int CB = 32 * CPT;
  extern __shared__ unsigned char smem_raw[];
  const int PH = pooled_height, PW = pooled_width;
  const int weights = kTileRows * PH + TW * PW;
  A* const buffers = reinterpret_cast<A*>(smem_raw);  // two sets: [8][PH] rows, [TW][PW] cols
  __shared__ int roi_list[kThreads];
  __shared__ int warp_hits[kTileRows];
  const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * 32 + lane;
  const int h0 = blockIdx.y * kTileRows, w0 = blockIdx.x * TW;
  const int h = h0 + warp;
  const int w_last = min(w0 + TW, W) - 1;
  const int h_last = min(h0 + kTileRows, H) - 1;
  const int64_t chunks = (channels + CB - 1) / CB;
  const int64_t bins = int64_t(PH) * PW;
  int parity = 0;
  for (int64_t z = blockIdx.z; z < batch * chunks; z += gridDim.z) {
    const int64_t n = z / chunks;
    const int64_t c_lane = (z % chunks) * CB + int64_t(lane) * CPT;
    const bool lane_full = c_lane + CPT <= channels;
    A acc[TW][CPT];
#pragma unroll
    for (int j = 0; j < TW; ++j)
#pragma unroll
      for (int k = 0; k < CPT; ++k) acc[j][k] = A(0);
    for (int64_t r0 = 0; r0 < num_rois; r0 += kThreads) {
      // List the rois of this batch of 256 that reach the tile, keeping their order.
      bool hit = false;
      const int64_t r = r0 + tid;
      if (r < num_rois) {
        const A* roi = rois + r * 5;
        if (roi_batch(roi[0], batch) == n) {
          const RoiAxis<A> ry = roi_axis(roi[2], roi[4], spatial_scale, PH, sampling_ratio, aligned, H);
          const RoiAxis<A> rx = roi_axis(roi[1], roi[3], spatial_scale, PW, sampling_ratio, aligned, W);
          int a, b, c, d;
          bin_range(ry, h0, h_last, PH, a, b);
          bin_range(rx, w0, w_last, PW, c, d);
          hit = ry.grid > 0 && rx.grid > 0 && a <= b && c <= d;
        }
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, hit);
      if (lane == 0) warp_hits[warp] = __popc(ballot);
      __syncthreads();
      int before = 0, count = 0;
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
        const int c = warp_hits[i];
        before += i < warp ? c : 0;
        count += c;
      }
      if (hit) roi_list[before + __popc(ballot & ((1u << lane) - 1))] = static_cast<int>(r - r0);
      __syncthreads();
      for (int i = 0; i < count; ++i) {
        const int64_t rr = r0 + roi_list[i];
        const A* roi = rois + rr * 5;
        const RoiAxis<A> ry = roi_axis(roi[2], roi[4], spatial_scale, PH, sampling_ratio, aligned, H);
        const RoiAxis<A> rx = roi_axis(roi[1], roi[3], spatial_scale, PW, sampling_ratio, aligned, W);
        // Double-buffered weights: one barrier per roi. The buffer filled here was last read
        // two rois ago, before the barrier every thread passed since.
        A* const wy = buffers + parity * weights;
        A* const wx = wy + kTileRows * PH;
        parity ^= 1;
        const A scale = A(1) / static_cast<A>(ry.grid * rx.grid);
        for (int t = tid; t < weights; t += kThreads) {
          if (t < kTileRows * PH) {
            const int y = h0 + t / PH;
            wy[t] = y < H ? bin_pixel_weight(ry, t % PH, y, H) * scale : A(0);
          } else {
            const int u = t - kTileRows * PH;
            const int x = w0 + u / PW;
            wx[u] = x < W ? bin_pixel_weight(rx, u % PW, x, W) : A(0);
          }
        }
        __syncthreads();
        if (h < H) {
          int ph_lo, ph_hi, pw_lo, pw_hi;
          bin_range(ry, h, h, PH, ph_lo, ph_hi);
          bin_range(rx, w0, w_last, PW, pw_lo, pw_hi);
          const T* g_roi = grad_t + rr * bins * channels + c_lane;
          for (int ph = ph_lo; ph <= ph_hi; ++ph) {
            const A a = wy[warp * PH + ph];
            if (a == A(0)) continue;
            for (int pw = pw_lo; pw <= pw_hi; ++pw) {
              const T* gp = g_roi + (int64_t(ph) * PW + pw) * channels;
              A v[CPT];
              if (VEC && lane_full) {
                const Pack<T, CPT> p = *reinterpret_cast<const Pack<T, CPT>*>(gp);
#pragma unroll
                for (int k = 0; k < CPT; ++k) v[k] = to_acc(p.v[k]);
              } else {
#pragma unroll
                for (int k = 0; k < CPT; ++k) v[k] = c_lane + k < channels ? to_acc(gp[k]) : A(0);
              }
#pragma unroll
              for (int j = 0; j < TW; ++j) {
                const A b = a * wx[j * PW + pw];
#pragma unroll
                for (int k = 0; k < CPT; ++k) acc[j][k] += b * v[k];
              }
            }
          }
        }
      }
      __syncthreads();  // roi_list and warp_hits are rewritten by the next batch
    }
    if (h < H) {
      const int64_t plane = int64_t(H) * W;
      T* out = grad_input + (n * channels + c_lane) * plane + int64_t(h) * W + w0;
#pragma unroll
      for (int k = 0; k < CPT; ++k) {
        if (c_lane + k < channels) {
#pragma unroll
          for (int j = 0; j < TW; ++j) {
            if (w0 + j < W) out[k * plane + j] = from_acc<T>(acc[j][k]);
          }
        }
      }
    }
  }
}

}  // namespace

#if !defined(__CUDACC_RTC__)  // host code: nvcc only, NVRTC compiles the kernels alone
template <typename T>
cudaError_t launch_nms_mask(const T* boxes_sorted, const int64_t* classes_sorted, int64_t n,
                            float iou_threshold, uint64_t* mask, cudaStream_t stream) {
  const int col_blocks = static_cast<int>((n + kNmsBlock - 1) / kNmsBlock);
  const dim3 grid(col_blocks, col_blocks < 65535 ? col_blocks : 65535);
  return ops_common::launch(nms_mask_kernel<T>, grid, kNmsBlock, 0, stream, boxes_sorted,
                            classes_sorted, n, col_blocks, iou_threshold,
                            reinterpret_cast<unsigned long long*>(mask));
}

cudaError_t launch_nms_reduce(const uint64_t* mask, const int64_t* order, int64_t n,
                              int64_t* keep, int64_t* num_kept, cudaStream_t stream) {
  const int col_blocks = static_cast<int>((n + kNmsBlock - 1) / kNmsBlock);
  const size_t shared = size_t(col_blocks) * sizeof(unsigned long long);
  if (shared > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        nms_reduce_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (err != cudaSuccess) return err;
  }
  // At least 64 threads (one per candidate of a step), at most 1024.
  int threads = ((col_blocks + 31) / 32) * 32;
  threads = threads < 64 ? 64 : (threads > 1024 ? 1024 : threads);
  return ops_common::launch(nms_reduce_kernel, 1, threads, shared, stream,
                            reinterpret_cast<const unsigned long long*>(mask), order, n,
                            col_blocks, keep, num_kept);
}

template <typename T>
cudaError_t launch_roi_align_forward(const T* input, const acc_t<T>* rois, const RoiAlignParams& p,
                                     T* output, cudaStream_t stream) {
  const int64_t chunks = (p.channels + kForwardChannels - 1) / kForwardChannels;
  const int64_t total = p.num_rois * chunks * p.pooled_height * p.pooled_width;
  constexpr int threads = 256;
  return ops_common::launch(roi_align_forward_kernel<T, kForwardChannels>,
                            ops_common::grid_size(total, threads, int64_t(1) << 20), threads, 0,
                            stream, input, rois, p.num_rois, p.batch, p.channels, p.height,
                            p.width, p.pooled_height, p.pooled_width,
                            static_cast<acc_t<T>>(p.spatial_scale), p.sampling_ratio, p.aligned,
                            output);
}

template <typename T>
cudaError_t launch_roi_align_backward(const T* grad_output, const acc_t<T>* rois,
                                      const RoiAlignParams& p, T* grad_input, cudaStream_t stream) {
  const int64_t chunks = (p.channels + kBackwardChannels - 1) / kBackwardChannels;
  const int64_t planes = p.batch * chunks;
  const dim3 block(32, kRowsPerBlock);
  const dim3 grid(static_cast<unsigned>((p.width + 31) / 32),
                  static_cast<unsigned>((p.height + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(planes < 65535 ? planes : 65535));
  return ops_common::launch(roi_align_backward_kernel<T, kBackwardChannels>, grid, block, 0,
                            stream, grad_output, rois, p.num_rois, p.batch, p.channels, p.height,
                            p.width, p.pooled_height, p.pooled_width,
                            static_cast<acc_t<T>>(p.spatial_scale), p.sampling_ratio, p.aligned,
                            grad_input);
}

template <typename T, int TW, int CPT>
cudaError_t launch_tiles(const T* grad_t, const acc_t<T>* rois, const RoiAlignParams& p,
                         T* grad_input, cudaStream_t stream) {
  using A = acc_t<T>;
  const int64_t chunks = (p.channels + 32 * CPT - 1) / (32 * CPT);
  const int64_t planes = p.batch * chunks;
  const dim3 block(32, kTileRows);
  const dim3 grid(static_cast<unsigned>((p.width + TW - 1) / TW),
                  static_cast<unsigned>((p.height + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>(planes < 65535 ? planes : 65535));
  const size_t shared = 2 * size_t(kTileRows * p.pooled_height + TW * p.pooled_width) * sizeof(A);
  const bool vec = p.channels % CPT == 0 &&
                   reinterpret_cast<uintptr_t>(grad_t) % (sizeof(T) * CPT) == 0;
  const auto kernel = vec ? roi_align_backward_tiles_kernel<T, TW, CPT, true>
                         : roi_align_backward_tiles_kernel<T, TW, CPT, false>;
  return ops_common::launch(kernel, grid, block, shared, stream, grad_t, rois, p.num_rois, p.batch,
                            p.channels, static_cast<int>(p.height), static_cast<int>(p.width),
                            p.pooled_height, p.pooled_width, static_cast<A>(p.spatial_scale),
                            p.sampling_ratio, p.aligned, grad_input);
}

template <typename T>
cudaError_t launch_roi_align_backward_tiles(const T* grad_t, const acc_t<T>* rois,
                                            const RoiAlignParams& p, T* grad_input,
                                            cudaStream_t stream) {
  // Wide channel groups amortise each roi's setup (listing, weights, barrier) over more
  // work; narrower groups (wider tiles instead) keep the lanes busy when channels are few.
  if (p.channels >= 192) return launch_tiles<T, 8, 8>(grad_t, rois, p, grad_input, stream);
  if (p.channels >= 96) return launch_tiles<T, 8, 4>(grad_t, rois, p, grad_input, stream);
  if (p.channels >= 48) return launch_tiles<T, 16, 2>(grad_t, rois, p, grad_input, stream);
  return launch_tiles<T, 16, 1>(grad_t, rois, p, grad_input, stream);
}

#define DETECTION_INSTANTIATE(T)                                                                 \
  template cudaError_t launch_nms_mask<T>(const T*, const int64_t*, int64_t, float, uint64_t*,    \
                                          cudaStream_t);                                         \
  template cudaError_t launch_roi_align_forward<T>(const T*, const acc_t<T>*,                     \
                                                   const RoiAlignParams&, T*, cudaStream_t);      \
  template cudaError_t launch_roi_align_backward<T>(const T*, const acc_t<T>*,                    \
                                                    const RoiAlignParams&, T*, cudaStream_t);     \
  template cudaError_t launch_roi_align_backward_tiles<T>(const T*, const acc_t<T>*,              \
                                                          const RoiAlignParams&, T*, cudaStream_t);

DETECTION_INSTANTIATE(float)
DETECTION_INSTANTIATE(double)
DETECTION_INSTANTIATE(ops_common::half_t)
DETECTION_INSTANTIATE(ops_common::bfloat16_t)
#endif  // !defined(__CUDACC_RTC__)

}  // namespace detection
