#pragma once
// Warp and block reductions for torch-free kernels (NVRTC compiles them too: no header
// beyond what NVRTC has built in). A row norm, a softmax denominator, a bias gradient: each
// thread folds its share into one value, then the warp (32 lanes, by register shuffles) or
// the block (the warps' results through 32 words of shared memory) combines them, and
// every thread gets the total, so the kernel can use it straight away (a row's scale, say).
//
//   const float total = ops_common::block_sum(partial);     // every thread of the block
//   const float peak = ops_common::block_reduce(partial, ops_common::Max{}, -INFINITY);
//
// The block functions take blockDim.x threads in whole warps (a multiple of 32, up to 1024;
// blockDim.y and z are 1), and every thread of the block must call them: they synchronise
// the block. They may be called several times in a row (each waits for the readers of the
// previous call's shared words). The warp functions need all 32 lanes of the warp active.
// The order of additions is fixed by the thread layout, so a sum is the same on every run.

namespace ops_common {

struct Sum {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

struct Max {
  // NaN wins, as torch's max does.
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};

struct Min {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return (a != a || a < b) ? a : b; }
};

// The reduction of v over the 32 lanes of a warp (butterfly shuffles): every lane gets it.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  return warp_reduce(v, Sum{});
}

// The reduction of v over the threads of the block: every thread gets it. identity is the
// value that changes nothing (0 for a sum, -infinity for a max).
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_results[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = (blockDim.x + 31) / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call's readers are done with warp_results
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  return warp_reduce(lane < warps ? warp_results[lane] : identity, op);
}

template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  return block_reduce(v, Sum{}, T(0));
}

}  // namespace ops_common
