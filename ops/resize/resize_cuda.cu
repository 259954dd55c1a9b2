// resize: CUDA kernels, torch-free. Both passes are memory-bound; the design keeps the
// DRAM traffic at one read of the source and one write of the result, in loads and stores
// of 16 bytes where the layout allows. Rows of 64 elements or more (x and channel
// together) go to tiled kernels (further down): a block reduces along one axis into shared
// memory, then along the other. Two backward kernels need no block barrier: channels_last
// with whole 16-byte channel groups (a thread per channel group reduces along x and y in
// registers) and NCHW upscaling along x (a warp per strip of input columns). The column
// kernels below take short rows and extreme ratios:
// - one thread owns one (plane, x, channel) column of up to 8 rows, so the column's taps
//   and weights are computed once and each source row it needs is loaded once: when
//   upscaling, consecutive output rows reuse the last two source rows; when downscaling,
//   all of a column's source rows are loaded at once, then computed;
// - neighbouring threads take neighbouring x (NCHW) or channels (NHWC), so every warp
//   access is coalesced in either memory format;
// - the backward gathers instead of scattering: each input pixel sums, in a fixed order,
//   the output pixels that read it (first_reader/end_reader in resize.h), so there are no
//   atomics, no zero-fill pass, and results are bitwise identical from run to run. ATen
//   scatters with atomicAdd into a zeroed buffer, which is neither.
#include <cuda_runtime.h>

#include <type_traits>
#include <cmath>
#include <cstdint>

#include "common/cuda_convert.cuh"
#include "common/launch.h"
#include "resize.h"
#include "resize_cuda.h"

namespace resize_op {
namespace {

using ops_common::acc_t;
using ops_common::from_acc;
using ops_common::to_acc;

constexpr int kThreads = 256;
// Below this many threads a launch leaves SMs idle, so columns get fewer rows each.
constexpr int64_t kMinThreads = int64_t{1} << 20;
// The same for the channels_last backward's vector kernel, whose threads each load 16 bytes
// from up to 5 pixels per row.
constexpr int64_t kMinVecThreads = int64_t{1} << 16;

struct Strides {
  int64_t in_row, in_plane, out_row, out_plane;
};

inline Strides strides_of(const Geometry& g) {
  const int64_t in_row = int64_t(g.in_w) * g.channels, out_row = int64_t(g.out_w) * g.channels;
  return {in_row, in_row * g.in_h, out_row, out_row * g.out_h};
}

// Thread t -> (plane, row block, x, channel), channel fastest. index_t is 32-bit whenever
// the thread count allows: 64-bit division costs several times more.
template <typename index_t>
struct Column {
  int64_t plane;
  int64_t channel;
  int x;
  int block;

  __device__ __forceinline__ Column(index_t t, index_t channels, index_t width, index_t blocks) {
    channel = static_cast<int64_t>(t % channels);
    t /= channels;
    x = static_cast<int>(t % width);
    t /= width;
    block = static_cast<int>(t % blocks);
    plane = static_cast<int64_t>(t / blocks);
  }
};

// Forward, row by row: the fallback when a column's source rows exceed the stage.
template <typename T, typename acc>
__device__ __forceinline__ void forward_rows_streamed(const T* src, int64_t c0, int64_t c1, acc wx0,
                                                      acc wx1, T* dst, const Strides& s,
                                                      const AxisMap<acc>& rows, int y_begin, int y_end) {
  auto source_row = [&](int y) {
    const T* row = src + y * s.in_row;
    return wx0 * to_acc(row[c0]) + wx1 * to_acc(row[c1]);
  };
  // The last two source rows read, interpolated along x: consecutive output rows share them.
  int row_a = -1, row_b = -1;
  acc value_a = 0, value_b = 0;
  for (int y = y_begin; y < y_end; ++y) {
    const Taps<acc> ty = taps(rows, y);
    const acc top = ty.i0 == row_a ? value_a : ty.i0 == row_b ? value_b : source_row(ty.i0);
    const acc bottom = ty.i1 == ty.i0 ? top : ty.i1 == row_b ? value_b : source_row(ty.i1);
    dst[y * s.out_row] = from_acc<T>((acc(1) - ty.l1) * top + ty.l1 * bottom);
    row_a = ty.i0;
    value_a = top;
    row_b = ty.i1;
    value_b = bottom;
  }
}

// kStage: source rows a thread loads before it computes. They are interpolated along x and
// parked in shared memory, one slot per row in the thread's own column of the buffer
// (stride blockDim.x: conflict-free, no barrier), because output rows index them at run time.
template <typename T, typename index_t, int kStage, bool kStaged>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const T* __restrict__ input, T* __restrict__ output, Geometry g, Strides s,
               AxisMap<acc_t<T>> rows, AxisMap<acc_t<T>> cols, int rows_per_thread,
               index_t blocks, index_t total) {
  using acc = acc_t<T>;
  extern __shared__ unsigned char shared_bytes[];
  acc* stage = reinterpret_cast<acc*>(shared_bytes) + threadIdx.x;
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const Column<index_t> col(t, static_cast<index_t>(g.channels), static_cast<index_t>(g.out_w), blocks);
    const Taps<acc> tx = taps(cols, col.x);
    const acc wx0 = acc(1) - tx.l1, wx1 = tx.l1;
    const T* src = input + col.plane * s.in_plane + col.channel;
    const int64_t c0 = int64_t(tx.i0) * g.channels, c1 = int64_t(tx.i1) * g.channels;
    T* dst = output + col.plane * s.out_plane + int64_t(col.x) * g.channels + col.channel;
    const int y_begin = col.block * rows_per_thread;
    const int y_end = min(y_begin + rows_per_thread, g.out_h);
    const int first = kStaged ? taps(rows, y_begin).i0 : 0;
    const int span = kStaged ? taps(rows, y_end - 1).i1 - first + 1 : kStage + 1;
    if (span > kStage) {
      forward_rows_streamed(src, c0, c1, wx0, wx1, dst, s, rows, y_begin, y_end);
      continue;
    }
    T left[kStage], right[kStage];
#pragma unroll
    for (int k = 0; k < kStage; ++k) {
      if (k < span) {
        const T* row = src + (first + k) * s.in_row;
        left[k] = row[c0];
        right[k] = row[c1];
      }
    }
#pragma unroll
    for (int k = 0; k < kStage; ++k) {
      if (k < span) stage[k * blockDim.x] = wx0 * to_acc(left[k]) + wx1 * to_acc(right[k]);
    }
    for (int y = y_begin; y < y_end; ++y) {
      const Taps<acc> ty = taps(rows, y);
      const acc top = stage[(ty.i0 - first) * blockDim.x];
      const acc bottom = stage[(ty.i1 - first) * blockDim.x];
      dst[y * s.out_row] = from_acc<T>((acc(1) - ty.l1) * top + ty.l1 * bottom);
    }
  }
}

// Sums output rows d_begin..d_end-1 (row_sum(j): output row d_begin + j already reduced
// along x) into input rows y_begin..y_end-1 and stores them. Output rows come in increasing
// order and each reads input rows i0 <= i1 <= i0 + 1, so two accumulators suffice: row
// `current` is complete, and stored, once a later output row reads past it. Rows nobody
// reads (downscaling) are stored as 0.
template <typename T, typename acc>
struct RowGather {
  const AxisMap<acc>& rows;
  T* dst;
  int64_t in_row;
  int y_begin;
  int current;
  acc sum_current = 0, sum_next = 0;

  __device__ __forceinline__ RowGather(const AxisMap<acc>& r, T* d, int64_t row, int begin)
      : rows(r), dst(d), in_row(row), y_begin(begin), current(begin - 1) {}

  __device__ __forceinline__ void advance_to(int y) {
    while (current < y) {
      if (current >= y_begin) dst[current * in_row] = from_acc<T>(sum_current);
      sum_current = sum_next;
      sum_next = 0;
      ++current;
    }
  }

  __device__ __forceinline__ void add(int d, acc value) {
    const Taps<acc> t = taps(rows, d);
    advance_to(t.i0);
    sum_current += (acc(1) - t.l1) * value;
    if (t.i1 == t.i0) {
      sum_current += t.l1 * value;
    } else {
      sum_next += t.l1 * value;
    }
  }
};

// kReaders: output columns that may read one input column (2x upscaling: 4); kStage: output
// rows a thread loads before it sums. Threads whose column or rows exceed them (rounding at
// odd ratios, large upscaling) take the loops with run-time bounds.
template <typename T, typename index_t, int kReaders, int kStage, bool kStaged>
__global__ void __launch_bounds__(kThreads)
backward_kernel(const T* __restrict__ grad_output, T* __restrict__ grad_input, Geometry g,
                Strides s, AxisMap<acc_t<T>> rows, AxisMap<acc_t<T>> cols, int rows_per_thread,
                index_t blocks, index_t total) {
  using acc = acc_t<T>;
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const Column<index_t> col(t, static_cast<index_t>(g.channels), static_cast<index_t>(g.in_w), blocks);
    const int x = col.x;
    const int x_begin = first_reader(cols, x);
    const int x_count = end_reader(cols, x) - x_begin;
    const int64_t step = g.channels;
    const T* src = grad_output + col.plane * s.out_plane + int64_t(x_begin) * step + col.channel;
    T* dst = grad_input + col.plane * s.in_plane + int64_t(x) * step + col.channel;
    const int y_begin = col.block * rows_per_thread;
    const int y_end = min(y_begin + rows_per_thread, g.in_h);
    const int d_begin = first_reader(rows, y_begin);
    const int span = end_reader(rows, y_end - 1) - d_begin;
    RowGather<T, acc> gather(rows, dst, s.in_row, y_begin);
    if (x_count <= kReaders) {
      acc w[kReaders];
#pragma unroll
      for (int k = 0; k < kReaders; ++k) {
        w[k] = k < x_count ? tap_weight(taps(cols, x_begin + k), x) : acc(0);
      }
      auto row_sum = [&](int j) {
        const T* row = src + (d_begin + j) * s.out_row;
        acc sum = 0;
#pragma unroll
        for (int k = 0; k < kReaders; ++k) {
          if (k < x_count) sum += w[k] * to_acc(row[k * step]);
        }
        return sum;
      };
      if (kStaged && span <= kStage) {
        T loaded[kStage][kReaders];
#pragma unroll
        for (int j = 0; j < kStage; ++j) {
#pragma unroll
          for (int k = 0; k < kReaders; ++k) {
            if (j < span && k < x_count) loaded[j][k] = src[(d_begin + j) * s.out_row + k * step];
          }
        }
#pragma unroll
        for (int j = 0; j < kStage; ++j) {
          if (j < span) {
            acc sum = 0;
#pragma unroll
            for (int k = 0; k < kReaders; ++k) {
              if (k < x_count) sum += w[k] * to_acc(loaded[j][k]);
            }
            gather.add(d_begin + j, sum);
          }
        }
      } else {
        // Two output rows per step: twice the loads in flight before the first is needed.
        int j = 0;
        for (; j + 1 < span; j += 2) {
          const acc v0 = row_sum(j), v1 = row_sum(j + 1);
          gather.add(d_begin + j, v0);
          gather.add(d_begin + j + 1, v1);
        }
        if (j < span) gather.add(d_begin + j, row_sum(j));
      }
    } else {
      for (int j = 0; j < span; ++j) {
        const T* row = src + (d_begin + j) * s.out_row;
        acc sum = 0;
        for (int k = 0; k < x_count; ++k) {
          sum += tap_weight(taps(cols, x_begin + k), x) * to_acc(row[k * step]);
        }
        gather.add(d_begin + j, sum);
      }
    }
    gather.advance_to(y_end);
  }
}

// ---------------------------------------------------------------------------- tiles
// A block owns a tile of kTileCols consecutive elements of a row (x and channel flattened,
// so NCHW and NHWC are the same loop) by `tile_rows` rows, and runs in two phases around
// one barrier:
// - A, along x: every row of the other side that the tile needs is reduced along x into
//   shared memory, one column per thread (the column's taps and weights computed once),
//   the loads of all rows independent of each other, so many are in flight;
// - B, along y: each warp takes whole rows, each lane four consecutive columns, combines
//   the shared rows and stores 4 elements at once (16 bytes in float).
// The forward's tile is output rows (A interpolates the source rows they read); the
// backward's tile is input rows (A reduces the output rows that read them, B gathers them
// in increasing output order: deterministic, no atomics).
constexpr int kTileCols = 128;  // 32 lanes x 4 elements
constexpr int kTileThreads = 256;
constexpr int kMaxTileBytes = 48 * 1024;
// Rows shorter than this leave most of a tile's columns idle: the column kernels take them.
constexpr int kMinTileLen = 64;

template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

struct Tiles {
  int64_t count;
  int tiles_x, tiles_y;
  int rows;  // rows per tile
  int cap;   // rows of shared memory
  bool vector;  // rows are multiples of 4 and the result is aligned: Pack4 stores
};

// Tile `tile` of a grid of tiles_x x tiles_y tiles per plane, planes one after another:
// its plane and its column and row in the grid.
__device__ __forceinline__ void tile_origin(int64_t tile, int tiles_x, int tiles_y, int64_t& plane,
                                            int& tx, int& ty) {
  tx = static_cast<int>(tile % tiles_x);
  const int64_t rest = tile / tiles_x;
  ty = static_cast<int>(rest % tiles_y);
  plane = rest / tiles_y;
}

// A store that marks its lines evict-first (st.global.cs): the forward's result is not
// read again, and keeping it out of L2 leaves room for the source rows that neighbouring
// tiles share. Faster for 2x upscaling on an H100, in fp32 and more so in bf16 (the
// kernel's figures: experiments/RESULTS.md, section kernel-suite).
template <typename P>
__device__ __forceinline__ void store_streaming(P* out, const P& p) {
  if constexpr (sizeof(P) == 32) {
    __stcs(reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(&p)[0]);
    __stcs(reinterpret_cast<float4*>(out) + 1, reinterpret_cast<const float4*>(&p)[1]);
  } else if constexpr (sizeof(P) == 16) {
    __stcs(reinterpret_cast<float4*>(out), *reinterpret_cast<const float4*>(&p));
  } else if constexpr (sizeof(P) == 8) {
    __stcs(reinterpret_cast<float2*>(out), *reinterpret_cast<const float2*>(&p));
  } else {
    *out = p;
  }
}

template <typename T, typename acc, bool kStreaming = false>
__device__ __forceinline__ void store4(T* out, int64_t j, int64_t len, bool vector, const acc (&v)[4]) {
  if (vector && j < len) {
    Pack4<T> p;
#pragma unroll
    for (int k = 0; k < 4; ++k) p.v[k] = from_acc<T>(v[k]);
    if (kStreaming) {
      store_streaming(reinterpret_cast<Pack4<T>*>(out), p);
    } else {
      *reinterpret_cast<Pack4<T>*>(out) = p;
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (j + k < len) out[k] = from_acc<T>(v[k]);
    }
  }
}

template <typename T, typename acc, int kMinBlocks>
__global__ void __launch_bounds__(kTileThreads, kMinBlocks)
forward_tile_kernel(const T* __restrict__ input, T* __restrict__ output, Geometry g, Strides s,
                    AxisMap<acc> rows, AxisMap<acc> cols, Tiles t) {
  extern __shared__ __align__(32) unsigned char tile_bytes[];
  acc* H = reinterpret_cast<acc*>(tile_bytes);
  const int col = threadIdx.x % kTileCols;
  const int lane4 = (threadIdx.x % 32) * 4;
  const int warp = threadIdx.x / 32;
  const int64_t in_len = s.in_row, out_len = s.out_row;
  for (int64_t tile = blockIdx.x; tile < t.count; tile += gridDim.x) {
    int64_t plane;
    int tx, ty;
    tile_origin(tile, t.tiles_x, t.tiles_y, plane, tx, ty);
    const int64_t j0 = int64_t(tx) * kTileCols;
    const int y0 = ty * t.rows, y1 = min(y0 + t.rows, g.out_h);
    const int first = taps(rows, y0).i0;
    const int span = taps(rows, y1 - 1).i1 - first + 1;
    const T* src = input + plane * s.in_plane;
    T* dst = output + plane * s.out_plane;
    const int64_t j = j0 + col;
    int64_t c0 = 0, c1 = 0;
    acc w0 = 0, w1 = 0;
    if (j < out_len) {
      const int x = static_cast<int>(g.channels == 1 ? j : j / g.channels);
      const int64_t c = j - int64_t(x) * g.channels;
      const Taps<acc> tx_ = taps(cols, x);
      c0 = int64_t(tx_.i0) * g.channels + c;
      c1 = int64_t(tx_.i1) * g.channels + c;
      w0 = acc(1) - tx_.l1;
      w1 = tx_.l1;
    }
    if (span > t.cap) {  // not planned for; correct, slow
      if (j < out_len) {
        for (int y = y0 + threadIdx.x / kTileCols; y < y1; y += kTileThreads / kTileCols) {
          const Taps<acc> ty_ = taps(rows, y);
          const T* a = src + int64_t(ty_.i0) * in_len;
          const T* b = src + int64_t(ty_.i1) * in_len;
          const acc top = w0 * to_acc(a[c0]) + w1 * to_acc(a[c1]);
          const acc bottom = w0 * to_acc(b[c0]) + w1 * to_acc(b[c1]);
          dst[int64_t(y) * out_len + j] = from_acc<T>((acc(1) - ty_.l1) * top + ty_.l1 * bottom);
        }
      }
      continue;
    }
    if (j < out_len) {
      const T* row = src + int64_t(first) * in_len;
#pragma unroll 4
      for (int r = threadIdx.x / kTileCols; r < span; r += kTileThreads / kTileCols) {
        const T* rr = row + int64_t(r) * in_len;
        H[r * kTileCols + col] = w0 * to_acc(rr[c0]) + w1 * to_acc(rr[c1]);
      }
    }
    __syncthreads();
    for (int y = y0 + warp; y < y1; y += kTileThreads / 32) {
      const Taps<acc> ty_ = taps(rows, y);
      const Pack4<acc> top = *reinterpret_cast<const Pack4<acc>*>(H + (ty_.i0 - first) * kTileCols + lane4);
      const Pack4<acc> bottom = *reinterpret_cast<const Pack4<acc>*>(H + (ty_.i1 - first) * kTileCols + lane4);
      const acc l = ty_.l1, m = acc(1) - ty_.l1;
      acc v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = m * top.v[k] + l * bottom.v[k];
      store4<T, acc, true>(dst + int64_t(y) * out_len + j0 + lane4, j0 + lane4, out_len, t.vector, v);
    }
    __syncthreads();
  }
}

// kReaders: output columns that may read one input column (2x upscaling: 4); a column with
// more takes the loop with run-time bounds.
// Registers capped for 8 resident blocks: faster here (the kernel's figures:
// experiments/RESULTS.md, section kernel-suite).
template <typename T, typename acc, int kReaders>
__global__ void __launch_bounds__(kTileThreads, 8)
backward_tile_kernel(const T* __restrict__ grad_output, T* __restrict__ grad_input, Geometry g,
                     Strides s, AxisMap<acc> rows, AxisMap<acc> cols, Tiles t) {
  extern __shared__ __align__(32) unsigned char tile_bytes[];
  acc* V = reinterpret_cast<acc*>(tile_bytes);
  const int col = threadIdx.x % kTileCols;
  const int lane4 = (threadIdx.x % 32) * 4;
  const int warp = threadIdx.x / 32;
  const int64_t in_len = s.in_row, out_len = s.out_row;
  const int64_t step = g.channels;
  for (int64_t tile = blockIdx.x; tile < t.count; tile += gridDim.x) {
    int64_t plane;
    int tx, ty;
    tile_origin(tile, t.tiles_x, t.tiles_y, plane, tx, ty);
    const int64_t j0 = int64_t(tx) * kTileCols;
    const int y0 = ty * t.rows, y1 = min(y0 + t.rows, g.in_h);
    const int d0 = first_reader(rows, y0);
    const int span = end_reader(rows, y1 - 1) - d0;
    const T* src = grad_output + plane * s.out_plane;
    T* dst = grad_input + plane * s.in_plane;
    const int64_t j = j0 + col;
    int x = 0, x_begin = 0, x_count = 0;
    const T* go = src;
    if (j < in_len) {
      x = static_cast<int>(g.channels == 1 ? j : j / g.channels);
      const int64_t c = j - int64_t(x) * g.channels;
      x_begin = first_reader(cols, x);
      x_count = end_reader(cols, x) - x_begin;
      go = src + int64_t(x_begin) * step + c;
    }
    auto column_sum = [&](int d) {
      const T* row = go + int64_t(d) * out_len;
      acc sum = 0;
      for (int k = 0; k < x_count; ++k) sum += tap_weight(taps(cols, x_begin + k), x) * to_acc(row[k * step]);
      return sum;
    };
    if (span > t.cap) {  // not planned for; correct, slow
      if (j < in_len) {
        for (int y = y0 + threadIdx.x / kTileCols; y < y1; y += kTileThreads / kTileCols) {
          const int d_end = end_reader(rows, y);
          acc sum = 0;
          for (int d = first_reader(rows, y); d < d_end; ++d) sum += tap_weight(taps(rows, d), y) * column_sum(d);
          dst[int64_t(y) * in_len + j] = from_acc<T>(sum);
        }
      }
      continue;
    }
    if (j < in_len) {
      if (x_count <= kReaders) {
        acc w[kReaders];
#pragma unroll
        for (int k = 0; k < kReaders; ++k) w[k] = k < x_count ? tap_weight(taps(cols, x_begin + k), x) : acc(0);
        const T* row = go + int64_t(d0) * out_len;
#pragma unroll 2
        for (int r = threadIdx.x / kTileCols; r < span; r += kTileThreads / kTileCols) {
          const T* rr = row + int64_t(r) * out_len;
          acc sum = 0;
#pragma unroll
          for (int k = 0; k < kReaders; ++k) {
            if (k < x_count) sum += w[k] * to_acc(rr[k * step]);
          }
          V[r * kTileCols + col] = sum;
        }
      } else {
        for (int r = threadIdx.x / kTileCols; r < span; r += kTileThreads / kTileCols) {
          V[r * kTileCols + col] = column_sum(d0 + r);
        }
      }
    }
    __syncthreads();
    for (int y = y0 + warp; y < y1; y += kTileThreads / 32) {
      const int d_end = end_reader(rows, y);
      acc v[4] = {0, 0, 0, 0};
      for (int d = first_reader(rows, y); d < d_end; ++d) {
        const acc w = tap_weight(taps(rows, d), y);
        const Pack4<acc> r = *reinterpret_cast<const Pack4<acc>*>(V + (d - d0) * kTileCols + lane4);
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] += w * r.v[k];
      }
      store4<T>(dst + int64_t(y) * in_len + j0 + lane4, j0 + lane4, in_len, t.vector, v);
    }
    __syncthreads();
  }
}

// NCHW backward (one channel, rows contiguous in x): the same tile of input rows, the two
// reductions in the other order, so that the wide reads of grad_output are contiguous
// 16-byte loads rather than the 4 scattered ones per element of reducing along x first:
// - A, along y: a task is 4 consecutive output columns (one aligned 16-byte load per
//   output row) by kGroup input rows; it walks the output rows that read those input rows
//   in increasing order, the loads of the next kAhead rows in flight, and keeps the 4 x 2
//   sums of the two rows being completed in registers (each output row adds to its two
//   taps, i0 and i1, like RowGather), parking each completed row in shared memory;
// - B, along x: one thread per input column sums its readers from shared memory.
// The block has an extra warp because a tile's output columns (2 per input column at 2x,
// plus the halo) make slightly more than 256 tasks.
constexpr int kRowsThreads = 288;
// Shared memory of the row tiles: above the default 48 KB a kernel has to opt in.
constexpr int kMaxRowsBytes = 96 * 1024;

struct RowTiles {
  int64_t count;
  int tiles_x, tiles_y;
  int rows;   // input rows per tile, a multiple of the kernel's row group
  int width;  // shared columns per row: an upper bound of the tile's output column window
  bool vector;
};

// One input pixel's gradient, gathered from every output pixel that reads it: the slow
// path of the tiled backward kernels for a tile wider than they planned for.
template <typename T, typename acc>
__device__ __forceinline__ acc gather_pixel(const T* src, int64_t out_row, const AxisMap<acc>& rows,
                                            const AxisMap<acc>& cols, int y, int x) {
  const int xe = end_reader(cols, x), ye = end_reader(rows, y);
  acc sum = 0;
  for (int d = first_reader(rows, y); d < ye; ++d) {
    acc row_sum = 0;
    for (int e = first_reader(cols, x); e < xe; ++e) {
      row_sum += tap_weight(taps(cols, e), x) * to_acc(src[int64_t(d) * out_row + e]);
    }
    sum += tap_weight(taps(rows, d), y) * row_sum;
  }
  return sum;
}

template <typename T, typename acc>
__device__ __forceinline__ void load4(const T* row, int e, int len, bool vector, acc (&v)[4]) {
  if (vector) {
    const Pack4<T> p = *reinterpret_cast<const Pack4<T>*>(row + e);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = to_acc(p.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = e + k < len ? to_acc(row[e + k]) : acc(0);
  }
}

template <typename T, typename acc, int kReaders, int kGroup, int kAhead, int kMinBlocks = 1>
__global__ void __launch_bounds__(kRowsThreads, kMinBlocks)
backward_rows_kernel(const T* __restrict__ grad_output, T* __restrict__ grad_input, Geometry g,
                     Strides s, AxisMap<acc> rows, AxisMap<acc> cols, RowTiles t) {
  extern __shared__ __align__(32) unsigned char tile_bytes[];
  acc* U = reinterpret_cast<acc*>(tile_bytes);
  for (int64_t tile = blockIdx.x; tile < t.count; tile += gridDim.x) {
    int64_t plane;
    int tx, ty;
    tile_origin(tile, t.tiles_x, t.tiles_y, plane, tx, ty);
    const int x0 = tx * kTileCols, x1 = min(x0 + kTileCols, g.in_w);
    const int y0 = ty * t.rows, y1 = min(y0 + t.rows, g.in_h);
    const int e0 = first_reader(cols, x0) & ~3;
    const int e1 = end_reader(cols, x1 - 1);
    const int groups = (e1 - e0 + 3) / 4;
    const T* src = grad_output + plane * s.out_plane;
    T* dst = grad_input + plane * s.in_plane;
    if (e1 - e0 > t.width) {  // not planned for; correct, slow
      for (int i = threadIdx.x; i < (y1 - y0) * kTileCols; i += blockDim.x) {
        const int y = y0 + i / kTileCols, x = x0 + i % kTileCols;
        if (x >= x1) continue;
        dst[int64_t(y) * s.in_row + x] = from_acc<T>(gather_pixel(src, s.out_row, rows, cols, y, x));
      }
      continue;
    }
    const int row_groups = (y1 - y0 + kGroup - 1) / kGroup;
    for (int task = threadIdx.x; task < row_groups * groups; task += blockDim.x) {
      const int group = task / groups;
      const int e = e0 + 4 * (task - group * groups);
      const int ya = y0 + group * kGroup;
      const int yb = min(ya + kGroup, y1);
      const int d_end = end_reader(rows, yb - 1);
      // As RowGather, 4 columns wide: `current` is complete once an output row's i0 passes it.
      acc* u = U + (e - e0);
      int current = ya - 1;
      acc sum_current[4] = {0, 0, 0, 0}, sum_next[4] = {0, 0, 0, 0};
      auto advance_to = [&](int y) {
        while (current < y) {
          if (current >= ya && current < yb) {
            Pack4<acc> p;
#pragma unroll
            for (int k = 0; k < 4; ++k) p.v[k] = sum_current[k];
            *reinterpret_cast<Pack4<acc>*>(u + (current - y0) * t.width) = p;
          }
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            sum_current[k] = sum_next[k];
            sum_next[k] = 0;
          }
          ++current;
        }
      };
      // The next kAhead rows' loads are issued before this row is summed.
      int d = first_reader(rows, ya);
      acc v[4] = {0, 0, 0, 0}, ahead[kAhead > 1 ? kAhead - 1 : 1][4];
      if (d < d_end) load4<T, acc>(src + int64_t(d) * s.out_row, e, g.out_w, t.vector, v);
#pragma unroll
      for (int a = 0; a + 1 < kAhead; ++a) {
#pragma unroll
        for (int k = 0; k < 4; ++k) ahead[a][k] = 0;
        if (d + 1 + a < d_end) load4<T, acc>(src + int64_t(d + 1 + a) * s.out_row, e, g.out_w, t.vector, ahead[a]);
      }
      for (; d < d_end; ++d) {
        acc next[4] = {0, 0, 0, 0};
        if (d + kAhead < d_end) load4<T, acc>(src + int64_t(d + kAhead) * s.out_row, e, g.out_w, t.vector, next);
        const Taps<acc> td = taps(rows, d);
        advance_to(td.i0);
        const acc w0 = acc(1) - td.l1, w1 = td.l1;
#pragma unroll
        for (int k = 0; k < 4; ++k) sum_current[k] += w0 * v[k];
        if (td.i1 == td.i0) {
#pragma unroll
          for (int k = 0; k < 4; ++k) sum_current[k] += w1 * v[k];
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) sum_next[k] += w1 * v[k];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if constexpr (kAhead == 1) {
            v[k] = next[k];
          } else {
            v[k] = ahead[0][k];
#pragma unroll
            for (int a = 0; a + 2 < kAhead; ++a) ahead[a][k] = ahead[a + 1][k];
            ahead[kAhead - 2][k] = next[k];
          }
        }
      }
      advance_to(yb);
    }
    __syncthreads();
    if (threadIdx.x < 2 * kTileCols) {
      const int x = x0 + threadIdx.x % kTileCols;
      if (x < x1) {
        const int x_begin = first_reader(cols, x);
        const int x_count = end_reader(cols, x) - x_begin;
        const acc* u = U + (x_begin - e0);
        if (x_count <= kReaders) {
          acc w[kReaders];
#pragma unroll
          for (int k = 0; k < kReaders; ++k) w[k] = k < x_count ? tap_weight(taps(cols, x_begin + k), x) : acc(0);
          for (int y = y0 + threadIdx.x / kTileCols; y < y1; y += 2) {
            const acc* ur = u + (y - y0) * t.width;
            acc sum = 0;
#pragma unroll
            for (int k = 0; k < kReaders; ++k) {
              if (k < x_count) sum += w[k] * ur[k];
            }
            dst[int64_t(y) * s.in_row + x] = from_acc<T>(sum);
          }
        } else {
          for (int y = y0 + threadIdx.x / kTileCols; y < y1; y += 2) {
            const acc* ur = u + (y - y0) * t.width;
            acc sum = 0;
            for (int k = 0; k < x_count; ++k) sum += tap_weight(taps(cols, x_begin + k), x) * ur[k];
            dst[int64_t(y) * s.in_row + x] = from_acc<T>(sum);
          }
        }
      }
    }
    __syncthreads();
  }
}

// channels_last backward, 16 bytes of channels per thread: a thread owns kVec consecutive
// channels of one input pixel and a block of input rows. It reduces along x in registers
// (the output pixels that read its pixel, each a 16-byte load: neighbouring threads take
// neighbouring channels, so a warp reads whole pixels), then walks the output rows in
// increasing order, adding each to its two row taps as RowGather does, kVec wide. No shared
// memory, no barrier: every thread's loads are independent and many are in flight.
template <typename T, int N>
struct alignas(N * sizeof(T)) VecN {
  T v[N];
};

template <typename T, typename acc, int N>
struct RowGatherN {
  const AxisMap<acc>& rows;
  T* dst;
  int64_t in_row;
  int y_begin;
  int current;
  acc sum_current[N], sum_next[N];

  __device__ __forceinline__ RowGatherN(const AxisMap<acc>& r, T* d, int64_t row, int begin)
      : rows(r), dst(d), in_row(row), y_begin(begin), current(begin - 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) sum_current[k] = sum_next[k] = 0;
  }

  __device__ __forceinline__ void advance_to(int y) {
    while (current < y) {
      if (current >= y_begin) {
        VecN<T, N> p;
#pragma unroll
        for (int k = 0; k < N; ++k) p.v[k] = from_acc<T>(sum_current[k]);
        *reinterpret_cast<VecN<T, N>*>(dst + current * in_row) = p;
      }
#pragma unroll
      for (int k = 0; k < N; ++k) {
        sum_current[k] = sum_next[k];
        sum_next[k] = 0;
      }
      ++current;
    }
  }

  __device__ __forceinline__ void add(int d, const acc (&value)[N]) {
    const Taps<acc> t = taps(rows, d);
    advance_to(t.i0);
    const acc w0 = acc(1) - t.l1, w1 = t.l1;
#pragma unroll
    for (int k = 0; k < N; ++k) sum_current[k] += w0 * value[k];
    if (t.i1 == t.i0) {
#pragma unroll
      for (int k = 0; k < N; ++k) sum_current[k] += w1 * value[k];
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) sum_next[k] += w1 * value[k];
    }
  }
};

template <typename T, typename index_t, int kReaders, int kBytes>
__global__ void __launch_bounds__(kThreads)
backward_vec_kernel(const T* __restrict__ grad_output, T* __restrict__ grad_input, Geometry g,
                    Strides s, AxisMap<acc_t<T>> rows, AxisMap<acc_t<T>> cols, int rows_per_thread,
                    index_t blocks, index_t total) {
  using acc = acc_t<T>;
  constexpr int kVec = kBytes / sizeof(T);
  using Vec = VecN<T, kVec>;
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const Column<index_t> col(t, static_cast<index_t>(g.channels / kVec), static_cast<index_t>(g.in_w), blocks);
    const int x = col.x;
    const int x_begin = first_reader(cols, x);
    const int x_count = end_reader(cols, x) - x_begin;
    const int64_t step = g.channels;
    const T* src = grad_output + col.plane * s.out_plane + int64_t(x_begin) * step + col.channel * kVec;
    T* dst = grad_input + col.plane * s.in_plane + int64_t(x) * step + col.channel * kVec;
    const int y_begin = col.block * rows_per_thread;
    const int y_end = min(y_begin + rows_per_thread, g.in_h);
    const int d_begin = first_reader(rows, y_begin);
    const int d_end = end_reader(rows, y_end - 1);
    RowGatherN<T, acc, kVec> gather(rows, dst, s.in_row, y_begin);
    if (x_count <= kReaders) {
      acc w[kReaders];
#pragma unroll
      for (int k = 0; k < kReaders; ++k) {
        w[k] = k < x_count ? tap_weight(taps(cols, x_begin + k), x) : acc(0);
      }
      for (int d = d_begin; d < d_end; ++d) {
        const T* row = src + int64_t(d) * s.out_row;
        Vec loaded[kReaders];
#pragma unroll
        for (int k = 0; k < kReaders; ++k) {
          if (k < x_count) loaded[k] = *reinterpret_cast<const Vec*>(row + k * step);
        }
        acc sum[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum[e] = 0;
#pragma unroll
        for (int k = 0; k < kReaders; ++k) {
          if (k < x_count) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) sum[e] += w[k] * to_acc(loaded[k].v[e]);
          }
        }
        gather.add(d, sum);
      }
    } else {
      for (int d = d_begin; d < d_end; ++d) {
        const T* row = src + int64_t(d) * s.out_row;
        acc sum[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum[e] = 0;
        for (int k = 0; k < x_count; ++k) {
          const acc w = tap_weight(taps(cols, x_begin + k), x);
          const Vec v = *reinterpret_cast<const Vec*>(row + k * step);
#pragma unroll
          for (int e = 0; e < kVec; ++e) sum[e] += w * to_acc(v.v[e]);
        }
        gather.add(d, sum);
      }
    }
    gather.advance_to(y_end);
  }
}

// NCHW backward when upscaling along x: one warp per task, a strip of up to 128 input
// columns by a block of input rows, and no block barrier (the row tiles' barrier leaves a
// block idle until its slowest load returns). Lanes own 16-byte groups of the strip's
// output-column window (groups lane, lane + 32, ...) and walk the output rows in increasing
// order, each row's loads issued one row ahead, adding each row to its two row taps in
// registers as RowGather does. An input row, once complete, goes through the warp's own row
// of shared memory and is reduced along x: each lane sums the readers of input columns
// lane, lane + 32, lane + 64, lane + 96 with weights computed once per task, and the
// warp's stores are coalesced. Deterministic: every sum has a fixed order.
constexpr int kStripCols = 128;
constexpr int kStripWarps = 8;
constexpr int kStripReaders = 5;

struct StripTasks {
  int64_t count;
  int strips;  // strips per row
  int blocks;  // row blocks per plane
  int rows;    // input rows per task
};

template <typename T, typename acc, int kF>
__global__ void __launch_bounds__(kStripWarps * 32)
backward_strip_kernel(const T* __restrict__ grad_output, T* __restrict__ grad_input, Geometry g,
                      Strides s, AxisMap<acc> rows, AxisMap<acc> cols, StripTasks tasks) {
  __shared__ __align__(16) acc window[kStripWarps][kF * 128];
  // The x weights live in shared memory (one slot per lane, conflict-free): in registers
  // they took the kernel past 100 registers.
  __shared__ acc weights[kStripWarps][4 * kStripReaders][32];
  const int lane = threadIdx.x % 32;
  acc* U = window[threadIdx.x / 32];
  acc(*W)[32] = weights[threadIdx.x / 32];
  const int64_t warps = int64_t(gridDim.x) * kStripWarps;
  for (int64_t task = int64_t(blockIdx.x) * kStripWarps + threadIdx.x / 32; task < tasks.count; task += warps) {
    int64_t plane;
    int strip, block;
    tile_origin(task, tasks.strips, tasks.blocks, plane, strip, block);
    const int x0 = strip * kStripCols, x1 = min(x0 + kStripCols, g.in_w);
    const int y0 = block * tasks.rows, y1 = min(y0 + tasks.rows, g.in_h);
    const int e0 = first_reader(cols, x0) & ~3;
    const int nf = (end_reader(cols, x1 - 1) - e0 + 3) / 4;
    const T* src = grad_output + plane * s.out_plane;
    T* dst = grad_input + plane * s.in_plane;
    if (nf > 32 * kF) {  // not planned for; correct, slow
      for (int y = y0; y < y1; ++y) {
        for (int x = x0 + lane; x < x1; x += 32) {
          dst[int64_t(y) * s.in_row + x] = from_acc<T>(gather_pixel(src, s.out_row, rows, cols, y, x));
        }
      }
      continue;
    }
    // This lane's input columns: first reader (relative to e0), reader count (-1: past the
    // strip) and weights.
    int xb[4], xc[4];
    __syncwarp();
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int x = x0 + lane + 32 * m;
      xb[m] = 0;
      xc[m] = -1;
      if (x < x1) {
        const int b = first_reader(cols, x);
        xc[m] = end_reader(cols, x) - b;
        xb[m] = b - e0;
      }
#pragma unroll
      for (int k = 0; k < kStripReaders; ++k) {
        W[m * kStripReaders + k][lane] = k < xc[m] ? tap_weight(taps(cols, e0 + xb[m] + k), x) : acc(0);
      }
    }
    acc cur[kF][4], nxt[kF][4];
#pragma unroll
    for (int f = 0; f < kF; ++f) {
#pragma unroll
      for (int k = 0; k < 4; ++k) cur[f][k] = nxt[f][k] = 0;
    }
    int current = y0 - 1;
    // Input row `current` is complete: reduce it along x and store it. Warp-uniform.
    auto emit = [&]() {
#pragma unroll
      for (int f = 0; f < kF; ++f) {
        if (lane + 32 * f < nf) {
          Pack4<acc> p;
#pragma unroll
          for (int k = 0; k < 4; ++k) p.v[k] = cur[f][k];
          *reinterpret_cast<Pack4<acc>*>(U + 4 * (lane + 32 * f)) = p;
        }
      }
      __syncwarp();
      T* out = dst + int64_t(current) * s.in_row + x0 + lane;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        if (xc[m] >= 0) {
          const acc* u = U + xb[m];
          acc sum = 0;
          if (xc[m] <= kStripReaders) {
#pragma unroll
            for (int k = 0; k < kStripReaders; ++k) {
              if (k < xc[m]) sum += W[m * kStripReaders + k][lane] * u[k];
            }
          } else {
            const int x = x0 + lane + 32 * m;
            for (int k = 0; k < xc[m]; ++k) sum += tap_weight(taps(cols, e0 + xb[m] + k), x) * u[k];
          }
          out[32 * m] = from_acc<T>(sum);
        }
      }
      __syncwarp();
    };
    auto advance_to = [&](int y) {
      while (current < y) {
        if (current >= y0) emit();
#pragma unroll
        for (int f = 0; f < kF; ++f) {
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            cur[f][k] = nxt[f][k];
            nxt[f][k] = 0;
          }
        }
        ++current;
      }
    };
    Pack4<T> v[kF], next[kF];
#pragma unroll
    for (int f = 0; f < kF; ++f) {
#pragma unroll
      for (int k = 0; k < 4; ++k) v[f].v[k] = next[f].v[k] = from_acc<T>(acc(0));
    }
    auto load = [&](int d, Pack4<T> (&p)[kF]) {
      const T* row = src + int64_t(d) * s.out_row + e0;
#pragma unroll
      for (int f = 0; f < kF; ++f) {
        if (lane + 32 * f < nf) p[f] = *reinterpret_cast<const Pack4<T>*>(row + 4 * (lane + 32 * f));
      }
    };
    const int d1 = end_reader(rows, y1 - 1);
    int d = first_reader(rows, y0);
    if (d < d1) load(d, v);
    for (; d < d1; ++d) {
      if (d + 1 < d1) load(d + 1, next);
      const Taps<acc> t = taps(rows, d);
      advance_to(t.i0);
      const acc w0 = acc(1) - t.l1, w1 = t.l1;
      const bool same = t.i1 == t.i0;
#pragma unroll
      for (int f = 0; f < kF; ++f) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const acc value = to_acc(v[f].v[k]);
          cur[f][k] += w0 * value;
          if (same) {
            cur[f][k] += w1 * value;
          } else {
            nxt[f][k] += w1 * value;
          }
          v[f].v[k] = next[f].v[k];
        }
      }
    }
    advance_to(y1);
  }
}

// Rows per tile: the most, up to max_rows, whose shared rows (bound(rows), an upper bound
// of the span the kernel computes) stay within target rows (or one row's) and fit
// kMaxTileBytes; rows 0 when even one row does not fit.
template <typename acc, typename Bound>
Tiles plan_tiles(int64_t planes, int64_t len, int height, int max_rows, int target, Bound bound) {
  const int64_t cap_max = kMaxTileBytes / int(kTileCols * sizeof(acc));
  int r = max_rows;
  while (r > 1 && (bound(r) > cap_max || bound(r) > ops_common::max_of<int64_t>(target, bound(1)))) r /= 2;
  Tiles t{};
  if (bound(r) > cap_max) return t;
  t.rows = r;
  t.cap = static_cast<int>(bound(r));
  t.tiles_x = static_cast<int>((len + kTileCols - 1) / kTileCols);
  t.tiles_y = (height + r - 1) / r;
  t.count = planes * t.tiles_x * t.tiles_y;
  t.vector = len % 4 == 0;
  return t;
}

// Output columns that read input columns x..x+127 lie in [src^-1(x - 1), src^-1(x + 128)),
// plus the alignment of its start to 4 and rounding.
inline int64_t row_tile_width(double sx) {
  return (int64_t(std::ceil((kTileCols + 1) / sx)) + 3 + 3 + 3) / 4 * 4;
}

#if !defined(__CUDACC_RTC__)  // host code: nvcc only, NVRTC compiles the kernels alone
// The tile, row, vector and strip launchers return whether their kernel suits the shape;
// when it does, err is its launch's error.
template <typename T, typename acc, int kGroup, int kAhead, int kMinBlocks = 1>
bool backward_rows_with(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                        const AxisMap<acc>& cols, cudaStream_t stream, cudaError_t& err) {
  const int64_t width = row_tile_width(cols.scale);
  const int64_t groups = width / 4;
  RowTiles t{};
  int r = 64;
  while (r > kGroup && (r / kGroup * groups > kRowsThreads ||
                        r * width * int64_t(sizeof(acc)) > kMaxRowsBytes)) {
    r /= 2;
  }
  if (r * width * int64_t(sizeof(acc)) > kMaxRowsBytes) return false;
  t.rows = r;
  t.width = static_cast<int>(width);
  t.tiles_x = (g.in_w + kTileCols - 1) / kTileCols;
  t.tiles_y = (g.in_h + r - 1) / r;
  t.count = g.planes * t.tiles_x * t.tiles_y;
  t.vector = g.out_w % 4 == 0 && reinterpret_cast<uintptr_t>(grad_output) % (4 * sizeof(T)) == 0;
  const Strides s = strides_of(g);
  const size_t shared = size_t(r) * width * sizeof(acc);
  if (shared > kMaxTileBytes) {
    static const cudaError_t opted = cudaFuncSetAttribute(
        backward_rows_kernel<T, acc, 4, kGroup, kAhead, kMinBlocks>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxRowsBytes);
    if (opted != cudaSuccess) return false;
  }
  const unsigned int grid = static_cast<unsigned int>(ops_common::min_of<int64_t>(t.count, INT32_MAX));
  err = ops_common::launch(backward_rows_kernel<T, acc, 4, kGroup, kAhead, kMinBlocks>, grid, kRowsThreads,
                           shared, stream, grad_output, grad_input, g, s, rows, cols, t);
  return true;
}

template <typename T, typename acc>
bool backward_rows(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                   const AxisMap<acc>& cols, cudaStream_t stream, cudaError_t& err) {
  if (g.channels != 1 || g.in_w < kMinTileLen) return false;
  if (!(cols.scale > 0) || !(rows.scale > 0)) return false;
  // Upscaling in x (a tile's output columns make 216 or more tasks of 8 rows): 8-row
  // tasks with 4 rows' loads ahead and registers capped for 4 resident blocks, faster than
  // 4-row tasks with one row ahead at 2x and 1.5x in fp32. Fewer columns (downscaling):
  // 4-row tasks keep the block busy, and the deeper prefetch was slower there (7:3).
  // double keeps the 4-row tasks: capped at 56 registers it would spill. The kernels'
  // figures: experiments/RESULTS.md, section kernel-suite.
  if constexpr (sizeof(T) <= 4) {
    const int64_t groups = row_tile_width(cols.scale) / 4;
    if (64 / 8 * groups >= 3 * kRowsThreads / 4 &&
        backward_rows_with<T, acc, 8, 4, 4>(grad_output, grad_input, g, rows, cols, stream, err)) {
      return true;
    }
  }
  return backward_rows_with<T, acc, 4, 1>(grad_output, grad_input, g, rows, cols, stream, err);
}

template <typename T, typename acc>
bool forward_tiled(const T* input, T* output, const Geometry& g, const AxisMap<acc>& rows,
                   const AxisMap<acc>& cols, cudaStream_t stream, cudaError_t& err) {
  const Strides s = strides_of(g);
  if (s.out_row < kMinTileLen) return false;
  const double scale = rows.scale;
  // Output rows y..y+r-1 read source rows floor(src(y))..floor(src(y+r-1))+1.
  // 64 rows: faster than 16 for 2x upscaling on an H100 (less per-tile setup and fewer
  // barriers per byte); 128 rows gained nothing. The kernel's figures:
  // experiments/RESULTS.md, section kernel-suite.
  Tiles t = plan_tiles<acc>(g.planes, s.out_row, g.out_h, 64, kMaxTileBytes,
                            [scale](int r) { return int64_t(std::ceil((r - 1) * scale)) + 3; });
  if (t.rows == 0) return false;
  t.vector = t.vector && reinterpret_cast<uintptr_t>(output) % (4 * sizeof(T)) == 0;
  const size_t shared = size_t(t.cap) * kTileCols * sizeof(acc);
  const unsigned int grid = static_cast<unsigned int>(ops_common::min_of<int64_t>(t.count, INT32_MAX));
  // Register caps for more resident blocks, measured on an H100 at 2x upscaling of
  // (8, 64, 128, 128): 16-bit types 8 blocks, faster than none; 4-byte types 5 blocks (48
  // registers, no spills), faster than uncapped or 4 blocks, where 8 made them slower.
  // The kernel's figures: experiments/RESULTS.md, section kernel-suite.
  constexpr int kMinBlocks = sizeof(T) == 2 ? 8 : sizeof(T) == 4 ? 5 : 1;
  err = ops_common::launch(forward_tile_kernel<T, acc, kMinBlocks>, grid, kTileThreads, shared, stream,
                           input, output, g, s, rows, cols, t);
  return true;
}

template <typename T, typename acc>
bool backward_tiled(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                    const AxisMap<acc>& cols, cudaStream_t stream, cudaError_t& err) {
  const Strides s = strides_of(g);
  if (s.in_row < kMinTileLen) return false;
  const double scale = rows.scale;
  // Input rows y..y+r-1 are read by the output rows whose src lies in [y - 1, y + r).
  // About 40 shared rows: 16 input rows at 2x upscaling, 64 when downscaling.
  Tiles t = plan_tiles<acc>(g.planes, s.in_row, g.in_h, 64, 40, [scale](int r) {
                              return scale > 0 ? int64_t(std::ceil((r + 1) / scale)) + 3 : int64_t{1} << 40;
                            });
  if (t.rows == 0) return false;
  t.vector = t.vector && reinterpret_cast<uintptr_t>(grad_input) % (4 * sizeof(T)) == 0;
  const size_t shared = size_t(t.cap) * kTileCols * sizeof(acc);
  const unsigned int grid = static_cast<unsigned int>(ops_common::min_of<int64_t>(t.count, INT32_MAX));
  err = ops_common::launch(backward_tile_kernel<T, acc, 4>, grid, kTileThreads, shared, stream, grad_output,
                           grad_input, g, s, rows, cols, t);
  return true;
}

// Rows per thread: the most (up to 8) whose rows to load, span(rows), fit the stage,
// halved while that leaves fewer than kMinThreads threads.
template <typename Span>
int rows_per_thread(int64_t columns, int height, int stage, Span span) {
  int rows = 8;
  while (rows > 1 && span(rows) > stage) rows /= 2;
  while (rows > 1 && columns * ((height + rows - 1) / rows) < kMinThreads) rows /= 2;
  return rows;
}

struct LaunchShape {
  unsigned int grid;
  int rows_per_thread;
  int64_t blocks, total;
};

inline LaunchShape launch_shape(int64_t columns, int height, int rows) {
  const int64_t blocks = (height + rows - 1) / rows;
  const int64_t total = columns * blocks;
  return {ops_common::grid_size(total, kThreads), rows, blocks, total};
}

template <int kStage, bool kStaged, typename T, typename acc>
cudaError_t forward_with_stage(const T* input, T* output, const Geometry& g, const AxisMap<acc>& rows,
                               const AxisMap<acc>& cols, cudaStream_t stream) {
  const int64_t columns = g.planes * g.channels * g.out_w;
  // Output rows y..y+r-1 read source rows floor(src(y))..floor(src(y+r-1))+1.
  const double scale = rows.scale;
  const int per_thread = rows_per_thread(columns, g.out_h, kStage, [scale](int r) {
    return kStaged ? std::ceil((r - 1) * scale) + 2 : 0.0;
  });
  const LaunchShape l = launch_shape(columns, g.out_h, per_thread);
  const size_t shared = kStaged ? sizeof(acc) * kStage * kThreads : 0;
  const Strides s = strides_of(g);
  if (l.total <= int64_t{INT32_MAX}) {  // t + stride stays below 2^32
    return ops_common::launch(forward_kernel<T, uint32_t, kStage, kStaged>, l.grid, kThreads, shared, stream,
                              input, output, g, s, rows, cols, l.rows_per_thread, uint32_t(l.blocks),
                              uint32_t(l.total));
  }
  return ops_common::launch(forward_kernel<T, uint64_t, kStage, kStaged>, l.grid, kThreads, shared, stream,
                            input, output, g, s, rows, cols, l.rows_per_thread, uint64_t(l.blocks),
                            uint64_t(l.total));
}

template <typename T, typename acc>
cudaError_t forward(const T* input, T* output, const Geometry& g, const AxisMap<acc>& rows,
                    const AxisMap<acc>& cols, cudaStream_t stream) {
  if (g.planes * g.channels == 0) return cudaSuccess;
  // Tiles up to 2 source rows per output row: past that their x pass also computes source
  // rows that no output row reads (7:3 NCHW: slower than the column kernel).
  cudaError_t err = cudaSuccess;
  if (rows.scale <= acc(2) && forward_tiled(input, output, g, rows, cols, stream, err)) {
    return err;
  }
  // The column kernels: short rows, steep downscaling. Staging pays when downscaling (each
  // output row needs fresh source rows: faster for 7:3 NCHW on an H200, on par for
  // channels_last); when upscaling, consecutive output rows reuse the last source rows, and
  // the streamed loop, with fewer instructions and registers, was faster.
  if (rows.scale < acc(1)) return forward_with_stage<1, false>(input, output, g, rows, cols, stream);
  return forward_with_stage<16, true>(input, output, g, rows, cols, stream);
}

template <int kReaders, int kStage, bool kStaged, typename T, typename acc>
cudaError_t backward_with(const T* grad_output, T* grad_input, const Geometry& g,
                          const AxisMap<acc>& rows, const AxisMap<acc>& cols, cudaStream_t stream) {
  const int64_t columns = g.planes * g.channels * g.in_w;
  // Input rows y..y+r-1 are read by the output rows whose src lies in [y - 1, y + r).
  const double scale = rows.scale;
  const int per_thread = rows_per_thread(columns, g.in_h, kStage, [scale](int r) {
    return !kStaged ? 0.0 : scale > 0 ? std::ceil((r + 1) / scale) + 1 : 1e9;
  });
  const LaunchShape l = launch_shape(columns, g.in_h, per_thread);
  const Strides s = strides_of(g);
  if (l.total <= int64_t{INT32_MAX}) {
    return ops_common::launch(backward_kernel<T, uint32_t, kReaders, kStage, kStaged>, l.grid, kThreads, 0,
                              stream, grad_output, grad_input, g, s, rows, cols, l.rows_per_thread,
                              uint32_t(l.blocks), uint32_t(l.total));
  }
  return ops_common::launch(backward_kernel<T, uint64_t, kReaders, kStage, kStaged>, l.grid, kThreads, 0,
                            stream, grad_output, grad_input, g, s, rows, cols, l.rows_per_thread,
                            uint64_t(l.blocks), uint64_t(l.total));
}

// The channels_last vector kernel: channels a multiple of 16 bytes, both buffers aligned to
// 16 bytes. 16 input rows per thread (fewer output rows read twice at the blocks' edges),
// halved while fewer than kMinVecThreads threads would run. On an H100, at 2x upscaling,
// 16 rows beat 4, 8 and 32, and the kernel beat the tile kernel it replaces in fp32 and
// bf16 (its figures: experiments/RESULTS.md, section kernel-suite).
template <typename T, typename acc, int kBytes = 16>
bool backward_vec(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                  const AxisMap<acc>& cols, cudaStream_t stream, cudaError_t& err) {
  constexpr int kVec = kBytes / sizeof(T);
  if (g.channels < kVec || g.channels % kVec != 0) return false;
  if (reinterpret_cast<uintptr_t>(grad_output) % kBytes != 0 || reinterpret_cast<uintptr_t>(grad_input) % kBytes != 0) {
    return false;
  }
  if (!(rows.scale > 0) || !(cols.scale > 0)) return false;
  const int64_t columns = g.planes * (g.channels / kVec) * g.in_w;
  int per_thread = 16;
  while (per_thread > 1 && columns * ((g.in_h + per_thread - 1) / per_thread) < kMinVecThreads) per_thread /= 2;
  const LaunchShape l = launch_shape(columns, g.in_h, per_thread);
  const Strides s = strides_of(g);
  if (l.total <= int64_t{INT32_MAX}) {
    err = ops_common::launch(backward_vec_kernel<T, uint32_t, 5, kBytes>, l.grid, kThreads, 0, stream,
                             grad_output, grad_input, g, s, rows, cols, l.rows_per_thread,
                             uint32_t(l.blocks), uint32_t(l.total));
  } else {
    err = ops_common::launch(backward_vec_kernel<T, uint64_t, 5, kBytes>, l.grid, kThreads, 0, stream,
                             grad_output, grad_input, g, s, rows, cols, l.rows_per_thread,
                             uint64_t(l.blocks), uint64_t(l.total));
  }
  return true;
}

// The strip kernel: NCHW, 1/2.2 < x scale <= 1 (upscaling up to 2.2x along x; at most 5
// output columns read an input column), y not downscaled, rows of whole 16-byte groups,
// every strip's window within 256 columns (2 groups per lane; checked exactly for up to 64
// strips per row). On an H100 it beats the row tiles at 2x upscaling in fp32 and bf16 and
// is on par at 1.5x (figures: experiments/RESULTS.md, section kernel-suite).
template <typename T, typename acc>
bool backward_strips(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                     const AxisMap<acc>& cols, cudaStream_t stream, cudaError_t& err) {
  if constexpr (sizeof(T) > 4) {
    return false;
  } else {
    if (g.channels != 1 || g.in_w < kMinTileLen || g.out_w % 4 != 0) return false;
    if (reinterpret_cast<uintptr_t>(grad_output) % (4 * sizeof(T)) != 0) return false;
    if (!(cols.scale >= acc(0.45) && cols.scale <= acc(1)) || !(rows.scale > 0 && rows.scale <= acc(1))) return false;
    const int strips = (g.in_w + kStripCols - 1) / kStripCols;
    int64_t window = row_tile_width(cols.scale);
    if (strips <= 64) {
      window = 0;
      for (int k = 0; k < strips; ++k) {
        const int x0 = k * kStripCols, x1 = ops_common::min_of(x0 + kStripCols, g.in_w);
        window = ops_common::max_of<int64_t>(window, end_reader(cols, x1 - 1) - (first_reader(cols, x0) & ~3));
      }
    }
    // 3 groups per lane (interior strips at 2x) were slower than the row tiles for
    // (2, 16, 256, 512) -> 2x fp32: those go to the row tiles.
    if (window > 256) return false;
    StripTasks t{};
    t.strips = strips;
    int r = 16;
    while (r > 4 && g.planes * strips * ((g.in_h + r - 1) / r) < 8192) r /= 2;
    t.rows = r;
    t.blocks = (g.in_h + r - 1) / r;
    t.count = g.planes * strips * t.blocks;
    const Strides s = strides_of(g);
    const unsigned int grid = ops_common::grid_size(t.count, kStripWarps);
    err = ops_common::launch(backward_strip_kernel<T, acc, 2>, grid, kStripWarps * 32, 0, stream, grad_output,
                             grad_input, g, s, rows, cols, t);
    return true;
  }
}

template <typename T, typename acc>
cudaError_t backward(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                     const AxisMap<acc>& cols, cudaStream_t stream) {
  if (g.planes * g.channels == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  if (backward_strips(grad_output, grad_input, g, rows, cols, stream, err) ||
      backward_rows(grad_output, grad_input, g, rows, cols, stream, err) ||
      backward_vec(grad_output, grad_input, g, rows, cols, stream, err) ||
      backward_tiled(grad_output, grad_input, g, rows, cols, stream, err)) {
    return err;
  }
  // The column kernels: short rows, steep upscaling. An input column is read by the output columns whose src lies in [x - 1, x + 1): about
  // 2 / scale of them, 1 or 2 when downscaling. There a stage of 6 output rows covers 8
  // input rows, all loaded at once. When upscaling, staging every row took too many
  // registers (95-158, a quarter of the threads resident): row pairs with the column's
  // weights in registers (8 readers: up to 3x) were faster.
  if (rows.scale >= acc(1) && cols.scale >= acc(1)) {
    return backward_with<4, 6, true>(grad_output, grad_input, g, rows, cols, stream);
  }
  return backward_with<8, 1, false>(grad_output, grad_input, g, rows, cols, stream);
}
#endif  // !defined(__CUDACC_RTC__)

}  // namespace

#if !defined(__CUDACC_RTC__)
#define RESIZE_DEFINE_LAUNCHERS(T, ACC)                                                         \
  cudaError_t launch_forward(const T* input, T* output, const Geometry& geometry,              \
                             const AxisMap<ACC>& rows, const AxisMap<ACC>& cols,               \
                             cudaStream_t stream) {                                            \
    return forward(input, output, geometry, rows, cols, stream);                               \
  }                                                                                            \
  cudaError_t launch_backward(const T* grad_output, T* grad_input, const Geometry& geometry,    \
                              const AxisMap<ACC>& rows, const AxisMap<ACC>& cols,              \
                              cudaStream_t stream) {                                           \
    return backward(grad_output, grad_input, geometry, rows, cols, stream);                    \
  }

RESIZE_DEFINE_LAUNCHERS(float, float)
RESIZE_DEFINE_LAUNCHERS(double, double)
RESIZE_DEFINE_LAUNCHERS(ops_common::half_t, float)
RESIZE_DEFINE_LAUNCHERS(ops_common::bfloat16_t, float)

#undef RESIZE_DEFINE_LAUNCHERS
#endif  // !defined(__CUDACC_RTC__)

}  // namespace resize_op
