// CUDA kernels of the LLTM cell; the GEMMs go to cuBLAS through the host composition in
// lltm.cpp. At the tutorial's size the cell is launch-bound, so each direction fuses all its
// elementwise work into one kernel: forward is cat + GEMM + 1 kernel, backward 1 kernel + one
// GEMM per gradient needed. Small forwards (up to kSmallForwardMacs multiply-adds, the
// tutorial's size among them) are one launch in all: forward_small_kernel computes the
// gates as dot products and runs the cell in the same kernel. Blocks are 32 features x 8
// rows, so a warp reads 32 consecutive features of a row (coalesced for any row stride).
// Backward also reduces the bias gradient over its rows in shared memory; past
// kOneBlockRowBatch rows a second kernel adds up the per-block-row partial sums in a fixed
// order (deterministic, no atomics).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "lltm.h"

namespace lltm {
namespace {

constexpr int kCols = 32;
constexpr int kRows = 8;
constexpr int64_t kOneBlockRowBatch = 64;

template <typename T, size_t N>
using Accessor = at::PackedTensorAccessor64<T, N, at::RestrictPtrTraits>;

template <typename T, size_t N>
Accessor<T, N> accessor(const at::Tensor& t) {
  return t.packed_accessor64<T, N, at::RestrictPtrTraits>();
}

template <typename scalar_t>
__global__ void __launch_bounds__(kCols * kRows)
    forward_kernel(Accessor<scalar_t, 2> gates, Accessor<const scalar_t, 1> bias,
                   Accessor<const scalar_t, 2> old_cell, Accessor<scalar_t, 2> new_h,
                   Accessor<scalar_t, 2> new_cell) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t batch = new_h.size(0);
  const int64_t state = new_h.size(1);
  for (int64_t b = int64_t(blockIdx.y) * kRows + threadIdx.y; b < batch;
       b += int64_t(gridDim.y) * kRows) {
    for (int64_t j = int64_t(blockIdx.x) * kCols + threadIdx.x; j < state;
         j += int64_t(gridDim.x) * kCols) {
      const auto r = cell_forward(opmath_t(gates[b][j]) + opmath_t(bias[j]),
                                  opmath_t(gates[b][state + j]) + opmath_t(bias[state + j]),
                                  opmath_t(gates[b][2 * state + j]) +
                                      opmath_t(bias[2 * state + j]),
                                  opmath_t(old_cell[b][j]));
      gates[b][j] = scalar_t(r.input_gate);
      gates[b][state + j] = scalar_t(r.output_gate);
      gates[b][2 * state + j] = scalar_t(r.candidate);
      new_cell[b][j] = scalar_t(r.new_cell);
      new_h[b][j] = scalar_t(r.new_h);
    }
  }
}

// One warp per (row b, feature j): the three gate pre-activations are dot products of
// hx[b] = [old_h[b], input[b]] with weight rows j, state + j and 2 state + j. Lanes stride
// over the state + features columns, so every warp reads its weight rows and hx row
// coalesced; the weights are read once per batch row, from L2 after the first. A shuffle
// reduction gives lane 0 the sums, and lane 0 runs the cell. The warps of feature 0 also
// write hx, which backward needs. Sums are in the compute type, as cuBLAS's are.
constexpr int kSmallWarps = 8;
constexpr int64_t kSmallForwardMacs = int64_t(1) << 22;

template <typename scalar_t>
__global__ void __launch_bounds__(kSmallWarps * 32)
    forward_small_kernel(Accessor<const scalar_t, 2> input, Accessor<const scalar_t, 2> weights,
                         Accessor<const scalar_t, 1> bias, Accessor<const scalar_t, 2> old_h,
                         Accessor<const scalar_t, 2> old_cell, Accessor<scalar_t, 2> hx,
                         Accessor<scalar_t, 2> gates, Accessor<scalar_t, 2> new_h,
                         Accessor<scalar_t, 2> new_cell) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t batch = new_h.size(0);
  const int64_t state = new_h.size(1);
  const int64_t columns = state + input.size(1);
  const int lane = threadIdx.x % 32;
  // The loop bound is the same for every lane of a warp, so whole warps enter the shuffles.
  for (int64_t w = int64_t(blockIdx.x) * kSmallWarps + threadIdx.x / 32; w < batch * state;
       w += int64_t(gridDim.x) * kSmallWarps) {
    const int64_t b = w / state;
    const int64_t j = w % state;
    opmath_t zi = 0, zo = 0, zc = 0;
#pragma unroll 4
    for (int64_t k = lane; k < columns; k += 32) {
      const scalar_t x = k < state ? old_h[b][k] : input[b][k - state];
      if (j == 0) {
        hx[b][k] = x;
      }
      zi += opmath_t(x) * opmath_t(weights[j][k]);
      zo += opmath_t(x) * opmath_t(weights[state + j][k]);
      zc += opmath_t(x) * opmath_t(weights[2 * state + j][k]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      zi += __shfl_xor_sync(0xffffffff, zi, offset);
      zo += __shfl_xor_sync(0xffffffff, zo, offset);
      zc += __shfl_xor_sync(0xffffffff, zc, offset);
    }
    if (lane == 0) {
      const auto r = cell_forward(zi + opmath_t(bias[j]), zo + opmath_t(bias[state + j]),
                                  zc + opmath_t(bias[2 * state + j]), opmath_t(old_cell[b][j]));
      gates[b][j] = scalar_t(r.input_gate);
      gates[b][state + j] = scalar_t(r.output_gate);
      gates[b][2 * state + j] = scalar_t(r.candidate);
      new_cell[b][j] = scalar_t(r.new_cell);
      new_h[b][j] = scalar_t(r.new_h);
    }
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kCols * kRows)
    backward_kernel(Accessor<const scalar_t, 2> grad_h, Accessor<const scalar_t, 2> grad_cell,
                    Accessor<const scalar_t, 2> new_cell, Accessor<const scalar_t, 2> gates,
                    Accessor<scalar_t, 2> d_gates, Accessor<scalar_t, 2> d_old_cell,
                    scalar_t* __restrict__ d_bias,
                    at::opmath_type<scalar_t>* __restrict__ partial_d_bias) {
  using opmath_t = at::opmath_type<scalar_t>;
  __shared__ opmath_t sums[3][kRows][kCols];
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  for (int64_t j0 = int64_t(blockIdx.x) * kCols; j0 < state; j0 += int64_t(gridDim.x) * kCols) {
    const int64_t j = j0 + tx;
    opmath_t sum_i = 0, sum_o = 0, sum_c = 0;
    if (j < state) {
#pragma unroll 4
      for (int64_t b = int64_t(blockIdx.y) * kRows + ty; b < batch;
           b += int64_t(gridDim.y) * kRows) {
        const auto r = cell_backward(
            opmath_t(gates[b][j]), opmath_t(gates[b][state + j]),
            opmath_t(gates[b][2 * state + j]), opmath_t(new_cell[b][j]),
            opmath_t(grad_h[b][j]), opmath_t(grad_cell[b][j]));
        d_gates[b][j] = scalar_t(r.d_input);
        d_gates[b][state + j] = scalar_t(r.d_output);
        d_gates[b][2 * state + j] = scalar_t(r.d_candidate);
        d_old_cell[b][j] = scalar_t(r.d_old_cell);
        sum_i += r.d_input;
        sum_o += r.d_output;
        sum_c += r.d_candidate;
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
        d_bias[k] = scalar_t(total);
      }
    }
    __syncthreads();
  }
}

template <typename scalar_t>
__global__ void sum_partials_kernel(const at::opmath_type<scalar_t>* __restrict__ partial,
                                    int64_t rows, int64_t cols, scalar_t* __restrict__ out) {
  using opmath_t = at::opmath_type<scalar_t>;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < cols;
       k += int64_t(gridDim.x) * blockDim.x) {
    opmath_t total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      total += partial[r * cols + k];
    }
    out[k] = scalar_t(total);
  }
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// As many 256-thread blocks as can be resident at once; grid-stride loops do the rest.
int64_t resident_blocks() {
  const auto* props = at::cuda::getCurrentDeviceProperties();
  return int64_t(props->multiProcessorCount) *
         std::max(1, props->maxThreadsPerMultiProcessor / (kCols * kRows));
}

dim3 grid_for(int64_t batch, int64_t state, int64_t max_block_rows) {
  const int64_t blocks = resident_blocks();
  const int64_t x = std::min({ceil_div(state, kCols), blocks, int64_t(INT32_MAX)});
  const int64_t y = std::min({ceil_div(batch, kRows), std::max<int64_t>(1, blocks / x),
                              max_block_rows, int64_t(65535)});
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

void forward_cuda_pointwise(const at::Tensor& gates, const at::Tensor& bias,
                            const at::Tensor& old_cell, const at::Tensor& new_h,
                            const at::Tensor& new_cell) {
  const c10::cuda::CUDAGuard device_guard(gates.device());
  const dim3 grid = grid_for(new_h.size(0), new_h.size(1), INT64_MAX);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(),
                                  "lltm_forward_cuda", [&] {
    forward_kernel<scalar_t><<<grid, dim3(kCols, kRows), 0, stream>>>(
        accessor<scalar_t, 2>(gates), accessor<const scalar_t, 1>(bias),
        accessor<const scalar_t, 2>(old_cell), accessor<scalar_t, 2>(new_h),
        accessor<scalar_t, 2>(new_cell));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

at::Tensor backward_cuda_pointwise(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                   const at::Tensor& new_cell, const at::Tensor& gates,
                                   const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  const c10::cuda::CUDAGuard device_guard(new_cell.device());
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  const dim3 grid = grid_for(batch, state, batch <= kOneBlockRowBatch ? 1 : INT64_MAX);
  const auto stream = at::cuda::getCurrentCUDAStream();
  auto d_bias = at::empty({3 * state}, new_cell.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(),
                                  "lltm_backward_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    at::Tensor partial;
    if (grid.y > 1) {
      partial = at::empty({int64_t(grid.y), 3 * state},
                          new_cell.options().dtype(c10::CppTypeToScalarType<opmath_t>::value));
    }
    backward_kernel<scalar_t><<<grid, dim3(kCols, kRows), 0, stream>>>(
        accessor<const scalar_t, 2>(grad_h), accessor<const scalar_t, 2>(grad_cell),
        accessor<const scalar_t, 2>(new_cell), accessor<const scalar_t, 2>(gates),
        accessor<scalar_t, 2>(d_gates), accessor<scalar_t, 2>(d_old_cell),
        d_bias.mutable_data_ptr<scalar_t>(),
        partial.defined() ? partial.mutable_data_ptr<opmath_t>() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (partial.defined()) {
      constexpr int threads = 256;
      const auto blocks = static_cast<unsigned>(
          std::min(ceil_div(3 * state, threads), resident_blocks()));
      sum_partials_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
          partial.const_data_ptr<opmath_t>(), grid.y, 3 * state,
          d_bias.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return d_bias;
}

ForwardResult forward_small(const ForwardShape& shape, const at::Tensor& input,
                            const at::Tensor& weights, const at::Tensor& bias,
                            const at::Tensor& old_h, const at::Tensor& old_cell) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const auto [batch, features, state] = shape;
  const auto options = input.options().memory_format(at::MemoryFormat::Contiguous);
  auto hx = at::empty({batch, state + features}, options);
  auto gates = at::empty({batch, 3 * state}, options);
  auto new_h = at::empty({batch, state}, options);
  auto new_cell = at::empty({batch, state}, options);
  constexpr int threads = kSmallWarps * 32;
  static_assert(threads == kCols * kRows, "resident_blocks() counts blocks of this size");
  const auto blocks =
      static_cast<unsigned>(std::min(ceil_div(batch * state, kSmallWarps), resident_blocks()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(),
                                  "lltm_forward_small_cuda", [&] {
    forward_small_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        accessor<const scalar_t, 2>(input), accessor<const scalar_t, 2>(weights),
        accessor<const scalar_t, 1>(bias), accessor<const scalar_t, 2>(old_h),
        accessor<const scalar_t, 2>(old_cell), accessor<scalar_t, 2>(hx),
        accessor<scalar_t, 2>(gates), accessor<scalar_t, 2>(new_h),
        accessor<scalar_t, 2>(new_cell));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {new_h, new_cell, gates, hx};
}

ForwardResult forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& old_h,
                           const at::Tensor& old_cell) {
  const ForwardShape shape = check_forward(input, weights, bias, old_h, old_cell);
  const int64_t macs = shape.batch * 3 * shape.state * (shape.state + shape.features);
  if (shape.batch * shape.state > 0 && macs <= kSmallForwardMacs) {
    return forward_small(shape, input, weights, bias, old_h, old_cell);
  }
  return compose_forward(&forward_cuda_pointwise, shape, input, weights, bias, old_h, old_cell);
}

BackwardResult backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                             const at::Tensor& new_cell, const at::Tensor& gates,
                             const at::Tensor& hx, const at::Tensor& weights,
                             std::array<bool, 5> output_mask) {
  return backward(&backward_cuda_pointwise, grad_h, grad_cell, new_cell, gates, hx, weights,
                  output_mask);
}

}  // namespace
}  // namespace lltm

TORCH_LIBRARY_IMPL(lltm, CUDA, m) {
  m.impl("forward", &lltm::forward_cuda);
  m.impl("backward", &lltm::backward_cuda);
}
