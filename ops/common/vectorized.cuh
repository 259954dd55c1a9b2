#pragma once
// Elementwise CUDA launcher shared by the activation ops: out[i] = f(in_0[i], ..., in_k[i])
// over contiguous buffers, with 64-bit indices. A memory-bound kernel reaches copy
// bandwidth only with wide accesses and enough bytes in flight, so each thread loads 128
// bits per tensor (float4, 8 x bf16) for kElementwiseUnroll independent steps before it
// computes. The grid has one block per kElementwiseThreads x kElementwiseUnroll vectors,
// so each thread makes one pass; the grid-stride loop only matters past 2^31 blocks.
// A grid capped at one wave of resident blocks, each looping over the tensor, fell short
// of clone() on an H200 even for the identity, where one pass per thread comes close to it
// (experiments/pointwise_variants.py; the kernels' figures: experiments/RESULTS.md, section
// kernel-suite). The n % width tail runs element by element; a pointer that is not 16-byte
// aligned (a tensor with a storage offset) sends the whole launch down the same loop with
// width 1.
// Torch-free: an op's .cu instantiates its launchers with OPS_INSTANTIATE_UNARY/BINARY
// (declared for its host side in common/pointwise_launch.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_convert.cuh"
#include "common/launch.h"
#include "common/pointwise_launch.h"
#include "common/scalar_math.h"
#include "common/std_lite.h"  // <type_traits>, <utility>

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

#if !defined(__CUDACC_RTC__)  // host code: nvcc only, NVRTC compiles the kernels alone
inline bool is_vector_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0;
}

template <int kWidth, int kUnroll, typename F, typename scalar_t, int kArity>
cudaError_t launch_elementwise_width(cudaStream_t stream, F f, int64_t n, scalar_t* out,
                                     const PointerArray<scalar_t, kArity>& in, int max_waves) {
  auto kernel = elementwise_kernel<kWidth, kUnroll, F, scalar_t, kArity>;
  const int64_t work = max_of<int64_t>((n / kWidth + kUnroll - 1) / kUnroll, n % kWidth);
  int64_t max_blocks = INT32_MAX;
  if (max_waves > 0) {
    // Resident blocks per SM, asked once per kernel: it depends on registers and threads
    // per SM, which the data-centre GPUs share.
    static const int blocks_per_sm = [&] {
      int blocks = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kElementwiseThreads, 0);
      return max_of(blocks, 1);
    }();
    max_blocks = resident_blocks(blocks_per_sm) * max_waves;
  }
  const unsigned int grid = grid_size(work, kElementwiseThreads, max_blocks);
  return launch(kernel, grid, kElementwiseThreads, 0, stream, f, n, out, in);
}

template <int kUnroll, typename F, typename scalar_t, typename... In>
cudaError_t launch_elementwise_config(cudaStream_t stream, int max_waves, F f, int64_t n,
                                      scalar_t* out, const In*... in) {
  static_assert((std::is_same_v<In, scalar_t> && ...), "inputs and output share one dtype");
  if (n == 0) return cudaSuccess;
  constexpr int kWidth = kVectorBytes / sizeof(scalar_t);
  const PointerArray<scalar_t, sizeof...(In)> pointers{{in...}};
  if (is_vector_aligned(out) && (is_vector_aligned(in) && ...)) {
    return launch_elementwise_width<kWidth, kUnroll>(stream, f, n, out, pointers, max_waves);
  }
  return launch_elementwise_width<1, kUnroll>(stream, f, n, out, pointers, max_waves);
}

// out[i] = f(in[i]...) for i < n on stream; the caller holds the device guard. kUnroll
// and max_waves (a cap on the grid in waves of resident blocks; 0: none) are the tuning
// knobs that experiments/pointwise_variants.py compares.
template <int kUnroll = kElementwiseUnroll, typename F, typename scalar_t, typename... In>
cudaError_t launch_elementwise(cudaStream_t stream, F f, int64_t n, scalar_t* out,
                               const In*... in) {
  return launch_elementwise_config<kUnroll>(stream, kElementwiseWaves, f, n, out, in...);
}

#endif  // !defined(__CUDACC_RTC__)

// An op's math (a struct with template <bool kFast, typename T> static T apply(T...),
// see ops/sigmoid/sigmoid.h) on one element in storage type T: computed in acc_t<T>,
// with the fast exp for 16-bit storage (common/scalar_math.h, kFastMath).
template <typename Op, typename T>
struct PointwiseApply {
  template <typename... Args>
  __device__ __forceinline__ T operator()(Args... args) const {
    return from_acc<T>(Op::template apply<kFastMath<T, acc_t<T>>>(to_acc(args)...));
  }
};

#if !defined(__CUDACC_RTC__)

template <typename Op, typename T>
cudaError_t launch_pointwise(cudaStream_t stream, int64_t n, T* out, const T* in) {
  return launch_elementwise(stream, PointwiseApply<Op, T>{}, n, out, in);
}

template <typename Op, typename T>
cudaError_t launch_pointwise(cudaStream_t stream, int64_t n, T* out, const T* a, const T* b) {
  return launch_elementwise(stream, PointwiseApply<Op, T>{}, n, out, a, b);
}

#endif  // !defined(__CUDACC_RTC__)

}  // namespace ops_common

// Compiles the launchers of one op's math for float, double, half and bfloat16, with
// one input (a forward) or two (a backward: grad and the saved tensor).
#if !defined(__CUDACC_RTC__)
#define OPS_INSTANTIATE_POINTWISE_TYPE(Op, T, ...) \
  template cudaError_t ops_common::launch_pointwise<Op, T>(cudaStream_t, int64_t, T*, __VA_ARGS__);
#define OPS_INSTANTIATE_POINTWISE_TYPES(Op, ...)                                       \
  OPS_INSTANTIATE_POINTWISE_TYPE(Op, float, __VA_ARGS__(float))                        \
  OPS_INSTANTIATE_POINTWISE_TYPE(Op, double, __VA_ARGS__(double))                      \
  OPS_INSTANTIATE_POINTWISE_TYPE(Op, ops_common::half_t, __VA_ARGS__(ops_common::half_t)) \
  OPS_INSTANTIATE_POINTWISE_TYPE(Op, ops_common::bfloat16_t, __VA_ARGS__(ops_common::bfloat16_t))
#define OPS_POINTWISE_ONE_INPUT(T) const T*
#define OPS_POINTWISE_TWO_INPUTS(T) const T*, const T*
#define OPS_INSTANTIATE_UNARY(Op) OPS_INSTANTIATE_POINTWISE_TYPES(Op, OPS_POINTWISE_ONE_INPUT)
#define OPS_INSTANTIATE_BINARY(Op) OPS_INSTANTIATE_POINTWISE_TYPES(Op, OPS_POINTWISE_TWO_INPUTS)
#else  // NVRTC compiles the kernels, never the launchers
#define OPS_INSTANTIATE_UNARY(Op)
#define OPS_INSTANTIATE_BINARY(Op)
#endif
