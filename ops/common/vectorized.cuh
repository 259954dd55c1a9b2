#pragma once
// Elementwise CUDA launcher shared by the activation ops: out[i] = f(in_0[i], ..., in_k[i])
// over contiguous buffers, with 64-bit indices. A memory-bound kernel reaches copy
// bandwidth only with wide accesses and enough bytes in flight, so each thread loads 128
// bits per tensor (float4, 8 x bf16) for kElementwiseUnroll independent steps before it
// computes. The grid has one block per kElementwiseThreads x kElementwiseUnroll vectors,
// so each thread makes one pass; the grid-stride loop only matters past 2^31 blocks.
// A grid capped at one wave of resident blocks, each looping over the tensor, ran at
// 91-92% of clone() on an H200 even for the identity; one pass per thread at 98-99.7%
// (experiments/pointwise_variants.py, results in experiments/RESULTS.md). The n % width
// tail runs element by element; a pointer that is not 16-byte aligned (a tensor with a
// storage offset) sends the whole launch down the same loop with width 1.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/cuda_launch.cuh"

namespace ops_common {

constexpr int kVectorBytes = 16;
constexpr int kElementwiseThreads = 256;
constexpr int kElementwiseUnroll = 2;
constexpr int kElementwiseWaves = 0;  // no cap on the grid (see above)

template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVector {
  T val[N];
};

template <typename T, int N>
struct PointerArray {
  const T* ptr[N];
};

template <typename F, typename T, int kArity, size_t... I>
__device__ __forceinline__ T apply(const F& f, const T (&args)[kArity], std::index_sequence<I...>) {
  return f(args[I]...);
}

template <int kWidth, int kUnroll, typename F, typename scalar_t, int kArity>
__global__ void __launch_bounds__(kElementwiseThreads)
elementwise_kernel(F f, int64_t n, scalar_t* __restrict__ out, PointerArray<scalar_t, kArity> in) {
  constexpr auto indices = std::make_index_sequence<kArity>{};
  using Vec = AlignedVector<scalar_t, kWidth>;
  const int64_t n_vec = n / kWidth;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  for (int64_t base = first; base < n_vec; base += stride * kUnroll) {
    Vec args[kUnroll][kArity];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * stride;
      if (v < n_vec) {
#pragma unroll
        for (int a = 0; a < kArity; ++a) args[u][a] = reinterpret_cast<const Vec*>(in.ptr[a])[v];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * stride;
      if (v < n_vec) {
        Vec result;
#pragma unroll
        for (int j = 0; j < kWidth; ++j) {
          scalar_t element[kArity];
#pragma unroll
          for (int a = 0; a < kArity; ++a) element[a] = args[u][a].val[j];
          result.val[j] = apply(f, element, indices);
        }
        reinterpret_cast<Vec*>(out)[v] = result;
      }
    }
  }

  for (int64_t i = n_vec * kWidth + first; i < n; i += stride) {
    scalar_t element[kArity];
#pragma unroll
    for (int a = 0; a < kArity; ++a) element[a] = in.ptr[a][i];
    out[i] = apply(f, element, indices);
  }
}

inline bool is_vector_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0;
}

template <int kWidth, int kUnroll, typename F, typename scalar_t, int kArity>
void launch_elementwise_width(F f, int64_t n, scalar_t* out, const PointerArray<scalar_t, kArity>& in,
                              int max_waves) {
  auto kernel = elementwise_kernel<kWidth, kUnroll, F, scalar_t, kArity>;
  const int64_t work = std::max<int64_t>((n / kWidth + kUnroll - 1) / kUnroll, n % kWidth);
  int64_t max_blocks = INT32_MAX;
  if (max_waves > 0) {
    // Resident blocks per SM, asked once per kernel: it depends on registers and threads
    // per SM, which the data-centre GPUs share.
    static const int blocks_per_sm = [&] {
      int blocks = 0;
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kElementwiseThreads, 0));
      return std::max(blocks, 1);
    }();
    max_blocks = resident_blocks(blocks_per_sm) * max_waves;
  }
  const int grid = grid_for(work, kElementwiseThreads, max_blocks);
  kernel<<<grid, kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(f, n, out, in);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int kUnroll, typename F, typename scalar_t, typename... In>
void launch_elementwise_config(int max_waves, F f, int64_t n, scalar_t* out, const In*... in) {
  static_assert((std::is_same_v<In, scalar_t> && ...), "inputs and output share one dtype");
  if (n == 0) return;
  constexpr int kWidth = kVectorBytes / sizeof(scalar_t);
  const PointerArray<scalar_t, sizeof...(In)> pointers{{in...}};
  if (is_vector_aligned(out) && (is_vector_aligned(in) && ...)) {
    launch_elementwise_width<kWidth, kUnroll>(f, n, out, pointers, max_waves);
  } else {
    launch_elementwise_width<1, kUnroll>(f, n, out, pointers, max_waves);
  }
}

// out[i] = f(in[i]...) for i < n on the current stream; the caller holds the device guard.
// kUnroll and max_waves (a cap on the grid in waves of resident blocks; 0: none) are the
// tuning knobs that experiments/pointwise_variants.py compares.
template <int kUnroll = kElementwiseUnroll, typename F, typename scalar_t, typename... In>
void launch_elementwise(F f, int64_t n, scalar_t* out, const In*... in) {
  launch_elementwise_config<kUnroll>(kElementwiseWaves, f, n, out, in...);
}

}  // namespace ops_common
