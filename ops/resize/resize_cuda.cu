// resize: CUDA kernels, torch-free. Both passes are memory-bound; the design keeps the
// DRAM traffic at one read of the source and one write of the result:
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
    forward_kernel<T, uint32_t, kStage, kStaged><<<l.grid, kThreads, shared, stream>>>(
        input, output, g, s, rows, cols, l.rows_per_thread, uint32_t(l.blocks), uint32_t(l.total));
  } else {
    forward_kernel<T, uint64_t, kStage, kStaged><<<l.grid, kThreads, shared, stream>>>(
        input, output, g, s, rows, cols, l.rows_per_thread, uint64_t(l.blocks), uint64_t(l.total));
  }
  return cudaGetLastError();
}

template <typename T, typename acc>
cudaError_t forward(const T* input, T* output, const Geometry& g, const AxisMap<acc>& rows,
                    const AxisMap<acc>& cols, cudaStream_t stream) {
  if (g.planes * g.channels == 0) return cudaSuccess;
  // Staging pays when downscaling (each output row needs fresh source rows: 1.37x faster
  // for 7:3 NCHW on an H200, on par for channels_last); when upscaling, consecutive output
  // rows reuse the last source rows, and the streamed loop, with fewer instructions and
  // registers, was faster (experiments/RESULTS.md).
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
    backward_kernel<T, uint32_t, kReaders, kStage, kStaged><<<l.grid, kThreads, 0, stream>>>(
        grad_output, grad_input, g, s, rows, cols, l.rows_per_thread, uint32_t(l.blocks), uint32_t(l.total));
  } else {
    backward_kernel<T, uint64_t, kReaders, kStage, kStaged><<<l.grid, kThreads, 0, stream>>>(
        grad_output, grad_input, g, s, rows, cols, l.rows_per_thread, uint64_t(l.blocks), uint64_t(l.total));
  }
  return cudaGetLastError();
}

template <typename T, typename acc>
cudaError_t backward(const T* grad_output, T* grad_input, const Geometry& g, const AxisMap<acc>& rows,
                     const AxisMap<acc>& cols, cudaStream_t stream) {
  if (g.planes * g.channels == 0) return cudaSuccess;
  // An input column is read by the output columns whose src lies in [x - 1, x + 1): about
  // 2 / scale of them, 1 or 2 when downscaling. There a stage of 6 output rows covers 8
  // input rows, all loaded at once. When upscaling, staging every row took too many
  // registers (95-158, a quarter of the threads resident): row pairs with the column's
  // weights in registers (8 readers: up to 3x) were faster (experiments/RESULTS.md).
  if (rows.scale >= acc(1) && cols.scale >= acc(1)) {
    return backward_with<4, 6, true>(grad_output, grad_input, g, rows, cols, stream);
  }
  return backward_with<8, 1, false>(grad_output, grad_input, g, rows, cols, stream);
}

}  // namespace

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
RESIZE_DEFINE_LAUNCHERS(__half, float)
RESIZE_DEFINE_LAUNCHERS(__nv_bfloat16, float)

#undef RESIZE_DEFINE_LAUNCHERS

}  // namespace resize_op
