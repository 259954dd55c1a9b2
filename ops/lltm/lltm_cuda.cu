// CUDA kernels of the LLTM cell, torch-free; the GEMMs of large cells go to cuBLAS through
// the host composition (lltm_cuda.cpp, lltm.cpp). At the tutorial's size the cell is
// launch-bound, so each direction fuses all its elementwise work into one kernel: forward
// is cat + GEMM + 1 kernel, backward 1 kernel + one GEMM per gradient needed. Small cells
// (up to kSmallForwardMacs multiply-adds, the tutorial's size among them) skip cuBLAS, whose
// host call costs more than the whole cell at that size: forward_small_kernel computes the
// gates as dot products and runs the cell in the same kernel; backward_small_kernel
// computes the weight and bias gradients with the pointwise stage, and
// backward_small_dhx_kernel the input and old_h gradients from its d_gates, where asked.
// Blocks of the pointwise kernels are 32 features x 8 rows, so a warp reads 32 consecutive
// features of a row (coalesced for any row stride). Backward also reduces the bias
// gradient over its rows in shared memory; past kOneBlockRowBatch rows a second kernel adds
// up the per-block-row partial sums in a fixed order (deterministic, no atomics).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_convert.cuh"
#include "common/launch.h"
#include "common/reduce.cuh"
#include "lltm.h"
#include "lltm_cuda.h"

namespace lltm {
namespace {

using ops_common::acc_t;
using ops_common::from_acc;
using ops_common::to_acc;

// Inputs are read through the read-only data cache, as const __restrict__ pointers are.
template <typename T>
__device__ __forceinline__ T ld(const T& element) {
  return ops_common::load_readonly(&element);
}

constexpr int kCols = 32;
constexpr int kRows = 8;
constexpr int kThreads = kCols * kRows;
constexpr int64_t kOneBlockRowBatch = 64;
constexpr int kBackwardRows = 4;

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(int64_t batch, int64_t state, Matrix<scalar_t> gates,
                   Vector<const scalar_t> bias, Matrix<const scalar_t> old_cell,
                   Matrix<scalar_t> new_h, Matrix<scalar_t> new_cell) {
  for (int64_t b = int64_t(blockIdx.y) * kRows + threadIdx.y; b < batch;
       b += int64_t(gridDim.y) * kRows) {
    for (int64_t j = int64_t(blockIdx.x) * kCols + threadIdx.x; j < state;
         j += int64_t(gridDim.x) * kCols) {
      const auto r =
          cell_forward(to_acc(gates(b, j)) + to_acc(ld(bias(j))),
                       to_acc(gates(b, state + j)) + to_acc(ld(bias(state + j))),
                       to_acc(gates(b, 2 * state + j)) + to_acc(ld(bias(2 * state + j))),
                       to_acc(ld(old_cell(b, j))));
      gates(b, j) = from_acc<scalar_t>(r.input_gate);
      gates(b, state + j) = from_acc<scalar_t>(r.output_gate);
      gates(b, 2 * state + j) = from_acc<scalar_t>(r.candidate);
      new_cell(b, j) = from_acc<scalar_t>(r.new_cell);
      new_h(b, j) = from_acc<scalar_t>(r.new_h);
    }
  }
}

// One warp per feature j and kSmallRows rows b: the three gate pre-activations of a row
// are dot products of hx[b] = [old_h[b], input[b]] with weight rows j, state + j and
// 2 state + j. Lanes stride over the state + features columns, so every warp reads its
// weight rows and hx rows coalesced; each weight element read serves kSmallRows rows, and
// the 3 kSmallRows sums of a lane are independent multiply-adds (with one row a warp, a
// lane's three sums each waited on its loads, and the kernel took several times the GPU
// time of the cuBLAS route's kernels at 64x128x256; experiments/RESULTS.md, section lltm).
// Consecutive warps take consecutive row groups of one feature:
// the warps of a block read the same three weight rows at about the same time (one L2
// read, then L1 hits). A shuffle reduction gives every lane the sums; lane r runs the
// cell of row r of the group. The warps of feature 0 also write hx, which backward needs.
// Sums are in the compute type, as cuBLAS's are; each is added up in the same order as
// with one row a warp.
constexpr int kSmallWarps = 8;
constexpr int kSmallRows = 4;
static_assert(kSmallWarps * 32 == kThreads, "one resident-block count for every kernel");
static_assert(kSmallRows <= 32, "a lane runs the cell of each row of its warp's group");

template <typename scalar_t>
__global__ void __launch_bounds__(kSmallWarps * 32)
    forward_small_kernel(int64_t batch, int64_t features, int64_t state,
                         Matrix<const scalar_t> input, Matrix<const scalar_t> weights,
                         Vector<const scalar_t> bias, Matrix<const scalar_t> old_h,
                         Matrix<const scalar_t> old_cell, Matrix<scalar_t> hx,
                         Matrix<scalar_t> gates, Matrix<scalar_t> new_h,
                         Matrix<scalar_t> new_cell) {
  using opmath_t = acc_t<scalar_t>;
  const int64_t columns = state + features;
  const int64_t groups = (batch + kSmallRows - 1) / kSmallRows;
  const int lane = threadIdx.x % 32;
  // The loop bound, j and b0 are the same for every lane of a warp, so whole warps enter
  // the shuffles, and a row past the batch is skipped by the whole warp.
  for (int64_t w = int64_t(blockIdx.x) * kSmallWarps + threadIdx.x / 32; w < groups * state;
       w += int64_t(gridDim.x) * kSmallWarps) {
    const int64_t j = w / groups;
    const int64_t b0 = (w % groups) * kSmallRows;
    opmath_t z[kSmallRows][3];
#pragma unroll
    for (int r = 0; r < kSmallRows; ++r) {
      z[r][0] = z[r][1] = z[r][2] = opmath_t(0);
    }
    for (int64_t k = lane; k < columns; k += 32) {
      const opmath_t wi = to_acc(ld(weights(j, k)));
      const opmath_t wo = to_acc(ld(weights(state + j, k)));
      const opmath_t wc = to_acc(ld(weights(2 * state + j, k)));
#pragma unroll
      for (int r = 0; r < kSmallRows; ++r) {
        const int64_t b = b0 + r;
        if (b < batch) {
          const scalar_t x = k < state ? ld(old_h(b, k)) : ld(input(b, k - state));
          if (j == 0) {
            hx(b, k) = x;
          }
          const opmath_t xa = to_acc(x);
          z[r][0] += xa * wi;
          z[r][1] += xa * wo;
          z[r][2] += xa * wc;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kSmallRows; ++r) {
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        z[r][g] = ops_common::warp_sum(z[r][g]);
      }
    }
#pragma unroll
    for (int r = 0; r < kSmallRows; ++r) {
      const int64_t b = b0 + r;
      if (lane == r && b < batch) {
        const auto c =
            cell_forward(z[r][0] + to_acc(ld(bias(j))), z[r][1] + to_acc(ld(bias(state + j))),
                         z[r][2] + to_acc(ld(bias(2 * state + j))), to_acc(ld(old_cell(b, j))));
        gates(b, j) = from_acc<scalar_t>(c.input_gate);
        gates(b, state + j) = from_acc<scalar_t>(c.output_gate);
        gates(b, 2 * state + j) = from_acc<scalar_t>(c.candidate);
        new_cell(b, j) = from_acc<scalar_t>(c.new_cell);
        new_h(b, j) = from_acc<scalar_t>(c.new_h);
      }
    }
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(int64_t batch, int64_t state, Matrix<const scalar_t> grad_h,
                    Matrix<const scalar_t> grad_cell, Matrix<const scalar_t> new_cell,
                    Matrix<const scalar_t> gates, Matrix<scalar_t> d_gates,
                    Matrix<scalar_t> d_old_cell, scalar_t* __restrict__ d_bias,
                    acc_t<scalar_t>* __restrict__ partial_d_bias) {
  using opmath_t = acc_t<scalar_t>;
  __shared__ opmath_t sums[3][kRows][kCols];
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const int64_t row_step = int64_t(gridDim.y) * kRows;
  for (int64_t j0 = int64_t(blockIdx.x) * kCols; j0 < state; j0 += int64_t(gridDim.x) * kCols) {
    const int64_t j = j0 + tx;
    opmath_t sum_i = 0, sum_o = 0, sum_c = 0;
    if (j < state) {
      // kBackwardRows rows at a time, all loads before any store: the compiler may not
      // move a load above a store it cannot prove disjoint, and one row's loads alone
      // leave too few bytes in flight (slower at 4096 x 2048 on an H200; the op's figures:
      // experiments/RESULTS.md, section kernel-suite).
      for (int64_t b0 = int64_t(blockIdx.y) * kRows + ty; b0 < batch;
           b0 += kBackwardRows * row_step) {
        opmath_t v[kBackwardRows][6];
#pragma unroll
        for (int u = 0; u < kBackwardRows; ++u) {
          const int64_t b = b0 + u * row_step;
          if (b < batch) {
            v[u][0] = to_acc(ld(gates(b, j)));
            v[u][1] = to_acc(ld(gates(b, state + j)));
            v[u][2] = to_acc(ld(gates(b, 2 * state + j)));
            v[u][3] = to_acc(ld(new_cell(b, j)));
            v[u][4] = to_acc(ld(grad_h(b, j)));
            v[u][5] = to_acc(ld(grad_cell(b, j)));
          }
        }
#pragma unroll
        for (int u = 0; u < kBackwardRows; ++u) {
          const int64_t b = b0 + u * row_step;
          if (b < batch) {
            const auto r = cell_backward(v[u][0], v[u][1], v[u][2], v[u][3], v[u][4], v[u][5]);
            d_gates(b, j) = from_acc<scalar_t>(r.d_input);
            d_gates(b, state + j) = from_acc<scalar_t>(r.d_output);
            d_gates(b, 2 * state + j) = from_acc<scalar_t>(r.d_candidate);
            d_old_cell(b, j) = from_acc<scalar_t>(r.d_old_cell);
            sum_i += r.d_input;
            sum_o += r.d_output;
            sum_c += r.d_candidate;
          }
        }
      }
    }
    sums[0][ty][tx] = sum_i;
    sums[1][ty][tx] = sum_o;
    sums[2][ty][tx] = sum_c;
    __syncthreads();
    if (ty < 3 && j < state) {  // warp ty adds up gate ty
      opmath_t total = 0;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        total += sums[ty][r][tx];
      }
      const int64_t k = ty * state + j;
      if (partial_d_bias != nullptr) {
        partial_d_bias[blockIdx.y * 3 * state + k] = total;
      } else {
        d_bias[k] = from_acc<scalar_t>(total);
      }
    }
    __syncthreads();
  }
}

// Backward of a small cell (batch up to kSmallBackwardBatch, multiply-adds up to
// kSmallForwardMacs) in one launch: the pointwise stage, the bias gradient and the weight
// gradient. Block per feature j: its threads compute the three gate gradients of every row
// into shared memory (and d_gates / d_old_cell where asked), warp g sums gate g's column
// for d_bias, then each thread forms d_weights(g state + j, k) = sum over rows of
// d_gates(b, g state + j) hx(b, k) for its columns k (hx rows read coalesced, the shared
// gradients broadcast). Every sum runs over the rows in one fixed order: deterministic.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    backward_small_kernel(int64_t batch, int64_t features, int64_t state,
                          Matrix<const scalar_t> grad_h, Matrix<const scalar_t> grad_cell,
                          Matrix<const scalar_t> new_cell, Matrix<const scalar_t> gates,
                          Matrix<const scalar_t> hx, Matrix<scalar_t> d_gates,
                          Matrix<scalar_t> d_old_cell, scalar_t* __restrict__ d_bias,
                          Matrix<scalar_t> d_weights) {
  using opmath_t = acc_t<scalar_t>;
  __shared__ opmath_t dz[3][kSmallBackwardBatch];
  const int64_t columns = state + features;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int64_t j = blockIdx.x; j < state; j += gridDim.x) {
    for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
      const auto r = cell_backward(
          to_acc(ld(gates(b, j))), to_acc(ld(gates(b, state + j))),
          to_acc(ld(gates(b, 2 * state + j))), to_acc(ld(new_cell(b, j))),
          to_acc(ld(grad_h(b, j))), to_acc(ld(grad_cell(b, j))));
      dz[0][b] = r.d_input;
      dz[1][b] = r.d_output;
      dz[2][b] = r.d_candidate;
      if (d_gates.data != nullptr) {
        d_gates(b, j) = from_acc<scalar_t>(r.d_input);
        d_gates(b, state + j) = from_acc<scalar_t>(r.d_output);
        d_gates(b, 2 * state + j) = from_acc<scalar_t>(r.d_candidate);
      }
      if (d_old_cell.data != nullptr) {
        d_old_cell(b, j) = from_acc<scalar_t>(r.d_old_cell);
      }
    }
    __syncthreads();
    if (d_bias != nullptr && warp < 3) {  // whole warps: the loop bound is the warp's
      opmath_t total = 0;
      for (int64_t b = lane; b < batch; b += 32) {
        total += dz[warp][b];
      }
      total = ops_common::warp_sum(total);
      if (lane == 0) {
        d_bias[warp * state + j] = from_acc<scalar_t>(total);
      }
    }
    if (d_weights.data != nullptr) {
      for (int64_t k = threadIdx.x; k < columns; k += blockDim.x) {
        opmath_t wi = 0, wo = 0, wc = 0;
        for (int64_t b = 0; b < batch; ++b) {
          const opmath_t x = to_acc(ld(hx(b, k)));
          wi += dz[0][b] * x;
          wo += dz[1][b] * x;
          wc += dz[2][b] * x;
        }
        d_weights(j, k) = from_acc<scalar_t>(wi);
        d_weights(state + j, k) = from_acc<scalar_t>(wo);
        d_weights(2 * state + j, k) = from_acc<scalar_t>(wc);
      }
    }
    __syncthreads();  // dz is rewritten for the next feature
  }
}

// The input and old_h gradients of a small cell, d_hx = d_gates @ W, split at column
// `state` into d_old_h and d_input (a null one is skipped): one launch where the cuBLAS
// route is two GEMM calls, each costing more host time than the cell's whole backward
// kernel. A block takes kDhxRows rows and 32 consecutive columns k (lanes: W's rows are
// read coalesced, a row's d_gates broadcast); its warps split the 3 state rows of W (the
// reduction axis) and add their partial sums in shared memory in a fixed order:
// deterministic, no atomics.
constexpr int kDhxRows = 4;

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    backward_small_dhx_kernel(int64_t batch, int64_t features, int64_t state,
                              Matrix<const scalar_t> d_gates, Matrix<const scalar_t> weights,
                              Matrix<scalar_t> d_input, Matrix<scalar_t> d_old_h) {
  using opmath_t = acc_t<scalar_t>;
  __shared__ opmath_t partial[kThreads / 32][kDhxRows][32];
  const int64_t columns = state + features;
  const int64_t chunks = (columns + 31) / 32;
  const int64_t tiles = (batch + kDhxRows - 1) / kDhxRows * chunks;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  // Every thread of a block walks the same tiles, so all reach each __syncthreads.
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t b0 = tile / chunks * kDhxRows;
    const int64_t k = tile % chunks * 32 + lane;
    opmath_t sum[kDhxRows];
#pragma unroll
    for (int r = 0; r < kDhxRows; ++r) {
      sum[r] = opmath_t(0);
    }
    if (k < columns) {
      for (int64_t g = warp; g < 3 * state; g += kThreads / 32) {
        const opmath_t w = to_acc(ld(weights(g, k)));
#pragma unroll
        for (int r = 0; r < kDhxRows; ++r) {
          if (b0 + r < batch) {
            sum[r] += to_acc(ld(d_gates(b0 + r, g))) * w;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kDhxRows; ++r) {
      partial[warp][r][lane] = sum[r];
    }
    __syncthreads();
    const int64_t b = b0 + warp;  // warp r adds up row r of the tile
    if (warp < kDhxRows && b < batch && k < columns) {
      opmath_t total = 0;
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) {
        total += partial[w][warp][lane];
      }
      if (k < state) {
        if (d_old_h.data != nullptr) {
          d_old_h(b, k) = from_acc<scalar_t>(total);
        }
      } else if (d_input.data != nullptr) {
        d_input(b, k - state) = from_acc<scalar_t>(total);
      }
    }
    __syncthreads();  // partial is rewritten by the next tile
  }
}

template <typename scalar_t>
__global__ void sum_partials_kernel(const acc_t<scalar_t>* __restrict__ partial, int64_t rows,
                                    int64_t cols, scalar_t* __restrict__ out) {
  using opmath_t = acc_t<scalar_t>;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < cols;
       k += int64_t(gridDim.x) * blockDim.x) {
    opmath_t total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      total += partial[r * cols + k];
    }
    out[k] = from_acc<scalar_t>(total);
  }
}

#if !defined(__CUDACC_RTC__)  // host code: nvcc only, NVRTC compiles the kernels alone
// As many 256-thread blocks as can be resident at once; grid-stride loops do the rest.
int64_t resident_blocks() {
  return ops_common::resident_blocks(ops_common::blocks_per_sm_by_threads(kThreads));
}

dim3 grid_for(int64_t batch, int64_t state, int64_t max_block_rows) {
  const int64_t blocks = resident_blocks();
  const int64_t x = ops_common::min_of<int64_t>(ops_common::ceil_div(state, kCols), blocks, INT32_MAX);
  const int64_t y = ops_common::min_of<int64_t>(ops_common::ceil_div(batch, kRows),
                                                 ops_common::max_of<int64_t>(1, blocks / x),
                                                 max_block_rows, 65535);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

dim3 backward_grid(int64_t batch, int64_t state) {
  return grid_for(batch, state, batch <= kOneBlockRowBatch ? 1 : INT64_MAX);
}
#endif  // !defined(__CUDACC_RTC__)

}  // namespace

#if !defined(__CUDACC_RTC__)
template <typename T>
cudaError_t forward_pointwise(cudaStream_t stream, int64_t batch, int64_t state, Matrix<T> gates,
                              Vector<const T> bias, Matrix<const T> old_cell, Matrix<T> new_h,
                              Matrix<T> new_cell) {
  if (batch * state == 0) return cudaSuccess;
  return ops_common::launch(forward_kernel<T>, grid_for(batch, state, INT64_MAX),
                            dim3(kCols, kRows), 0, stream, batch, state, gates, bias, old_cell,
                            new_h, new_cell);
}

template <typename T>
cudaError_t forward_small(cudaStream_t stream, int64_t batch, int64_t features, int64_t state,
                          Matrix<const T> input, Matrix<const T> weights, Vector<const T> bias,
                          Matrix<const T> old_h, Matrix<const T> old_cell, Matrix<T> hx,
                          Matrix<T> gates, Matrix<T> new_h, Matrix<T> new_cell) {
  if (batch * state == 0) return cudaSuccess;
  const int64_t warps = ops_common::ceil_div(batch, kSmallRows) * state;
  const auto blocks = static_cast<unsigned>(
      ops_common::min_of(ops_common::ceil_div(warps, kSmallWarps), resident_blocks()));
  return ops_common::launch(forward_small_kernel<T>, blocks, kSmallWarps * 32, 0, stream, batch,
                            features, state, input, weights, bias, old_h, old_cell, hx, gates,
                            new_h, new_cell);
}

int64_t backward_workspace_rows(int64_t batch, int64_t state) {
  if (batch * state == 0) return 0;
  const dim3 grid = backward_grid(batch, state);
  return grid.y > 1 ? int64_t(grid.y) : 0;
}

template <typename T>
cudaError_t backward_pointwise(cudaStream_t stream, int64_t batch, int64_t state,
                               Matrix<const T> grad_h, Matrix<const T> grad_cell,
                               Matrix<const T> new_cell, Matrix<const T> gates,
                               Matrix<T> d_gates, Matrix<T> d_old_cell, T* d_bias,
                               acc_t<T>* workspace) {
  if (batch * state == 0) return cudaSuccess;
  const dim3 grid = backward_grid(batch, state);
  acc_t<T>* partial = grid.y > 1 ? workspace : nullptr;
  const cudaError_t err =
      ops_common::launch(backward_kernel<T>, grid, dim3(kCols, kRows), 0, stream, batch, state,
                         grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell, d_bias, partial);
  if (err != cudaSuccess || partial == nullptr) return err;
  constexpr int threads = 256;
  const auto blocks = static_cast<unsigned>(
      ops_common::min_of(ops_common::ceil_div(3 * state, threads), resident_blocks()));
  return ops_common::launch(sum_partials_kernel<T>, blocks, threads, 0, stream, partial,
                            int64_t(grid.y), 3 * state, d_bias);
}

template <typename T>
cudaError_t backward_small(cudaStream_t stream, int64_t batch, int64_t features, int64_t state,
                           Matrix<const T> grad_h, Matrix<const T> grad_cell,
                           Matrix<const T> new_cell, Matrix<const T> gates, Matrix<const T> hx,
                           Matrix<T> d_gates, Matrix<T> d_old_cell, T* d_bias,
                           Matrix<T> d_weights) {
  if (batch * state == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(ops_common::min_of(state, resident_blocks()));
  return ops_common::launch(backward_small_kernel<T>, blocks, kThreads, 0, stream, batch,
                            features, state, grad_h, grad_cell, new_cell, gates, hx, d_gates,
                            d_old_cell, d_bias, d_weights);
}

template <typename T>
cudaError_t backward_small_dhx(cudaStream_t stream, int64_t batch, int64_t features,
                               int64_t state, Matrix<const T> d_gates, Matrix<const T> weights,
                               Matrix<T> d_input, Matrix<T> d_old_h) {
  if (batch * (state + features) == 0) return cudaSuccess;
  const int64_t tiles =
      ops_common::ceil_div(batch, kDhxRows) * ops_common::ceil_div(state + features, 32);
  const auto blocks = static_cast<unsigned>(ops_common::min_of(tiles, resident_blocks()));
  return ops_common::launch(backward_small_dhx_kernel<T>, blocks, kThreads, 0, stream, batch,
                            features, state, d_gates, weights, d_input, d_old_h);
}

#define LLTM_INSTANTIATE(T)                                                                    \
  template cudaError_t forward_pointwise<T>(cudaStream_t, int64_t, int64_t, Matrix<T>,         \
                                            Vector<const T>, Matrix<const T>, Matrix<T>,       \
                                            Matrix<T>);                                        \
  template cudaError_t forward_small<T>(cudaStream_t, int64_t, int64_t, int64_t,               \
                                        Matrix<const T>, Matrix<const T>, Vector<const T>,     \
                                        Matrix<const T>, Matrix<const T>, Matrix<T>, Matrix<T>, \
                                        Matrix<T>, Matrix<T>);                                 \
  template cudaError_t backward_pointwise<T>(cudaStream_t, int64_t, int64_t, Matrix<const T>,  \
                                             Matrix<const T>, Matrix<const T>, Matrix<const T>, \
                                             Matrix<T>, Matrix<T>, T*, acc_t<T>*);         \
  template cudaError_t backward_small<T>(cudaStream_t, int64_t, int64_t, int64_t,              \
                                         Matrix<const T>, Matrix<const T>, Matrix<const T>,    \
                                         Matrix<const T>, Matrix<const T>, Matrix<T>,          \
                                         Matrix<T>, T*, Matrix<T>);                            \
  template cudaError_t backward_small_dhx<T>(cudaStream_t, int64_t, int64_t, int64_t,          \
                                             Matrix<const T>, Matrix<const T>, Matrix<T>,       \
                                             Matrix<T>);
LLTM_INSTANTIATE(float)
LLTM_INSTANTIATE(double)
LLTM_INSTANTIATE(ops_common::half_t)
LLTM_INSTANTIATE(ops_common::bfloat16_t)
#undef LLTM_INSTANTIATE
#endif  // !defined(__CUDACC_RTC__)

}  // namespace lltm
