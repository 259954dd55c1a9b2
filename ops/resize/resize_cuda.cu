// resize: CUDA kernels, torch-free. Both passes are memory-bound; the design keeps the
// DRAM traffic at one read of the source and one write of the result:
// - one thread owns one (plane, x, channel) column of up to kRowsPerThread rows, so the
//   column's taps and weights are computed once, and each row it reads is loaded once and
//   reused by the next output rows (upscaling reads every source row 2+ times);
// - neighbouring threads take neighbouring x (NCHW) or channels (NHWC), so every warp
//   access is coalesced in either memory format;
// - the backward gathers instead of scattering: each input pixel sums, in a fixed order,
//   the output pixels that read it (first_reader/end_reader in resize.h), so there are no
//   atomics, no zero-fill pass, and results are bitwise identical from run to run. ATen
//   scatters with atomicAdd into a zeroed buffer, which is neither.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
constexpr int kRowsPerThread = 8;
// Below this many threads a launch leaves SMs idle, so columns get fewer rows each.
constexpr int64_t kMinThreads = int64_t{1} << 20;
// Output columns that may read one input column kept in registers (2x upscaling needs 4,
// 3x needs 7); more fall back to recomputing the weights per row.
constexpr int kRegisterReaders = 8;

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

template <typename T, typename index_t>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const T* __restrict__ input, T* __restrict__ output, Geometry g, Strides s,
               AxisMap<acc_t<T>> rows, AxisMap<acc_t<T>> cols, int rows_per_thread,
               index_t blocks, index_t total) {
  using acc = acc_t<T>;
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const Column<index_t> col(t, static_cast<index_t>(g.channels), static_cast<index_t>(g.out_w), blocks);
    const Taps<acc> tx = taps(cols, col.x);
    const acc wx0 = acc(1) - tx.l1, wx1 = tx.l1;
    const T* src = input + col.plane * s.in_plane + col.channel;
    const int64_t c0 = int64_t(tx.i0) * g.channels, c1 = int64_t(tx.i1) * g.channels;
    T* dst = output + col.plane * s.out_plane + int64_t(col.x) * g.channels + col.channel;
    auto source_row = [&](int y) {
      const T* row = src + y * s.in_row;
      return wx0 * to_acc(row[c0]) + wx1 * to_acc(row[c1]);
    };
    // The last two source rows read, interpolated along x: consecutive output rows
    // share them whenever the scale is below 2.
    int row_a = -1, row_b = -1;
    acc value_a = 0, value_b = 0;
    const int y_begin = col.block * rows_per_thread;
    const int y_end = min(y_begin + rows_per_thread, g.out_h);
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
}

// Sums output rows d_begin..d_end-1 (row_sum(d): the row already reduced along x) into
// input rows y_begin..y_end-1 and stores them. Output rows come in increasing order and
// each reads input rows i0 <= i1 <= i0 + 1, so two accumulators suffice: row `current`
// is complete, and stored, once a later output row reads past it. Rows nobody reads
// (downscaling) are stored as 0.
template <typename T, typename acc, typename RowSum>
__device__ __forceinline__ void gather_rows(const RowSum& row_sum, const AxisMap<acc>& rows,
                                            int d_begin, int d_end, int y_begin, int y_end,
                                            T* dst, int64_t in_row) {
  int current = y_begin - 1;
  acc sum_current = 0, sum_next = 0;
  auto advance_to = [&](int y) {
    while (current < y) {
      if (current >= y_begin) dst[current * in_row] = from_acc<T>(sum_current);
      sum_current = sum_next;
      sum_next = 0;
      ++current;
    }
  };
  auto add = [&](const Taps<acc>& t, acc value) {
    advance_to(t.i0);
    sum_current += (acc(1) - t.l1) * value;
    if (t.i1 == t.i0) {
      sum_current += t.l1 * value;
    } else {
      sum_next += t.l1 * value;
    }
  };
  int d = d_begin;
  // Two output rows per step: twice the loads in flight before the first is needed.
  for (; d + 1 < d_end; d += 2) {
    const acc v0 = row_sum(d), v1 = row_sum(d + 1);
    add(taps(rows, d), v0);
    add(taps(rows, d + 1), v1);
  }
  if (d < d_end) add(taps(rows, d), row_sum(d));
  advance_to(y_end);
}

template <typename T, typename index_t>
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
    const int d_end = end_reader(rows, y_end - 1);
    if (x_count <= kRegisterReaders) {
      acc w[kRegisterReaders];
#pragma unroll
      for (int k = 0; k < kRegisterReaders; ++k) {
        w[k] = k < x_count ? tap_weight(taps(cols, x_begin + k), x) : acc(0);
      }
      auto row_sum = [&](int d) {
        const T* row = src + d * s.out_row;
        acc sum = 0;
#pragma unroll
        for (int k = 0; k < kRegisterReaders; ++k) {
          if (k < x_count) sum += w[k] * to_acc(row[k * step]);
        }
        return sum;
      };
      gather_rows<T>(row_sum, rows, d_begin, d_end, y_begin, y_end, dst, s.in_row);
    } else {
      auto row_sum = [&](int d) {
        const T* row = src + d * s.out_row;
        acc sum = 0;
        for (int k = 0; k < x_count; ++k) {
          sum += tap_weight(taps(cols, x_begin + k), x) * to_acc(row[k * step]);
        }
        return sum;
      };
      gather_rows<T>(row_sum, rows, d_begin, d_end, y_begin, y_end, dst, s.in_row);
    }
  }
}

// Rows per thread: kRowsPerThread, halved while that leaves fewer than kMinThreads.
inline int rows_per_thread(int64_t columns, int height) {
  int rows = kRowsPerThread;
  while (rows > 1 && columns * ((height + rows - 1) / rows) < kMinThreads) rows /= 2;
  return rows;
}

template <typename Kernel32, typename Kernel64, typename T, typename acc>
cudaError_t launch(Kernel32 kernel32, Kernel64 kernel64, const T* from, T* to, const Geometry& g,
                   const AxisMap<acc>& rows, const AxisMap<acc>& cols, int width, int height,
                   cudaStream_t stream) {
  const int64_t columns = g.planes * g.channels * width;
  if (columns == 0 || height == 0) return cudaSuccess;
  const int per_thread = rows_per_thread(columns, height);
  const int64_t blocks = (height + per_thread - 1) / per_thread;
  const int64_t total = columns * blocks;
  const unsigned int grid = ops_common::grid_size(total, kThreads);
  const Strides s = strides_of(g);
  if (total <= int64_t{INT32_MAX}) {  // t + stride stays below 2^32
    kernel32<<<grid, kThreads, 0, stream>>>(from, to, g, s, rows, cols, per_thread,
                                            static_cast<uint32_t>(blocks), static_cast<uint32_t>(total));
  } else {
    kernel64<<<grid, kThreads, 0, stream>>>(from, to, g, s, rows, cols, per_thread,
                                            static_cast<uint64_t>(blocks), static_cast<uint64_t>(total));
  }
  return cudaGetLastError();
}

}  // namespace

#define RESIZE_DEFINE_LAUNCHERS(T, ACC)                                                         \
  cudaError_t launch_forward(const T* input, T* output, const Geometry& geometry,              \
                             const AxisMap<ACC>& rows, const AxisMap<ACC>& cols,               \
                             cudaStream_t stream) {                                            \
    return launch(forward_kernel<T, uint32_t>, forward_kernel<T, uint64_t>, input, output,     \
                  geometry, rows, cols, geometry.out_w, geometry.out_h, stream);               \
  }                                                                                            \
  cudaError_t launch_backward(const T* grad_output, T* grad_input, const Geometry& geometry,    \
                              const AxisMap<ACC>& rows, const AxisMap<ACC>& cols,              \
                              cudaStream_t stream) {                                           \
    return launch(backward_kernel<T, uint32_t>, backward_kernel<T, uint64_t>, grad_output,     \
                  grad_input, geometry, rows, cols, geometry.in_w, geometry.in_h, stream);     \
  }

RESIZE_DEFINE_LAUNCHERS(float, float)
RESIZE_DEFINE_LAUNCHERS(double, double)
RESIZE_DEFINE_LAUNCHERS(__half, float)
RESIZE_DEFINE_LAUNCHERS(__nv_bfloat16, float)

#undef RESIZE_DEFINE_LAUNCHERS

}  // namespace resize_op
