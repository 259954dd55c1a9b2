#pragma once
// Launch configuration for torch-free .cu files: grid sizes for grid-stride loops, (in
// CUDA sources) how many blocks the current device holds at once, and launch(), the one
// way an op's launcher starts a kernel.
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#endif

namespace ops_common {

// The least and the greatest of a few values (std::min/max need <algorithm>, a large
// part of what every phase of nvcc parses in a small .cu).
template <typename T>
constexpr T min_of(T a, T b) {
  return b < a ? b : a;
}
template <typename T, typename... Rest>
constexpr T min_of(T a, T b, Rest... rest) {
  return min_of<T>(min_of<T>(a, b), rest...);
}
template <typename T>
constexpr T max_of(T a, T b) {
  return a < b ? b : a;
}
template <typename T, typename... Rest>
constexpr T max_of(T a, T b, Rest... rest) {
  return max_of<T>(max_of<T>(a, b), rest...);
}

// One block per threads_per_block work items, at most max_blocks (and never past what
// one launch can address); a grid-stride loop in the kernel covers the rest.
inline unsigned int grid_size(int64_t work_items, int threads_per_block,
                              int64_t max_blocks = INT32_MAX) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned int>(
      max_of<int64_t>(1, min_of<int64_t>(needed, max_blocks, INT32_MAX)));
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)  // host code: not under NVRTC
}  // namespace ops_common
#include "common/kernel_swap.h"
#if defined(OPS_DEBUG)
#include "common/debug_launch.h"
#endif
namespace ops_common {

// Streaming multiprocessors of the current device, asked once per device: the
// attribute query costs a driver call, and launch-bound kernels (LLTM) feel it.
inline int multiprocessor_count() {
  constexpr int kMaxDevices = 64;
  static int counts[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return 1;
  if (counts[device] == 0) {
    int count = 1;
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    counts[device] = max_of(count, 1);
  }
  return counts[device];
}

// launch(kernel, grid, block, shared_bytes, stream, args...) starts kernel as
// kernel<<<grid, block, shared_bytes, stream>>>(args...) would: each argument converts to
// its parameter's type (a wrong count or an inconvertible argument is a compile error),
// the launch goes through cudaLaunchKernel (what <<<>>> lowers to; capturable in a CUDA
// graph) and it returns the launch's error, else cudaGetLastError(), which it clears, as
// the launchers' checks did after <<<>>>. One named entry point instead of <<<>>> keeps
// launch syntax out of device code, so NVRTC can compile a .cu's kernels
// (jit_tools/swap/nvrtc.py), and it is where a kernel swapped into the live process is
// launched instead (common/kernel_swap.h, jit_tools/swap/kernels.py).
// A debug build (OPS_DEBUG) checks each launch and waits for its kernel
// (common/debug_launch.h).
template <typename... Params>
struct KernelLaunch {
  static cudaError_t run(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                         cudaStream_t stream, Params... params) {
    void* args[] = {const_cast<void*>(static_cast<const void*>(&params))..., nullptr};
    const void* stub = reinterpret_cast<const void*>(kernel);
#if defined(OPS_DEBUG)
    const cudaError_t refused = debug::check_launch(stub, grid, block, shared_bytes, params...);
    if (refused != cudaSuccess) return refused;
    return debug::finish(stub, stream, start(stub, grid, block, shared_bytes, stream, args));
#else
    return start(stub, grid, block, shared_bytes, stream, args);
#endif
  }

  static cudaError_t start(const void* stub, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, void** args) {
    if (kernel_swap::enabled()) {  // a kernel swapped in by the loader (common/kernel_swap.h)
      void* f = nullptr;
      switch (kernel_swap::replacement_for(stub, &f)) {
        case kernel_swap::Use::kReplacement:
          return kernel_swap::launch_replacement(f, grid, block, shared_bytes, stream, args);
        case kernel_swap::Use::kNone:  // stale code, no replacement: the loader logged why
          return cudaErrorInvalidPtx;
        case kernel_swap::Use::kKernel:
          break;
      }
    }
    const cudaError_t launched = cudaLaunchKernel(stub, grid, block, args, shared_bytes, stream);
    const cudaError_t last = cudaGetLastError();
    return launched != cudaSuccess ? launched : last;
  }
};

template <typename... Params, typename... Args>
[[nodiscard]] inline cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block,
                                        size_t shared_bytes, cudaStream_t stream,
                                        Args&&... args) {
  static_assert(sizeof...(Args) == sizeof...(Params),
                "launch(): pass exactly one argument per kernel parameter");
  return KernelLaunch<Params...>::run(kernel, grid, block, shared_bytes, stream,
                                      static_cast<Args&&>(args)...);
}

// Blocks that fit on the current device at once (resident_per_sm blocks on every SM).
inline int64_t resident_blocks(int resident_per_sm) {
  return int64_t(multiprocessor_count()) * resident_per_sm;
}

// Resident blocks per SM for blocks of threads_per_block threads, as far as the thread
// count alone allows (the kernels here are small in registers and shared memory).
inline int blocks_per_sm_by_threads(int threads_per_block) {
  constexpr int kMaxDevices = 64;
  static int threads[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return 1;
  if (threads[device] == 0) {
    int count = 2048;
    cudaDeviceGetAttribute(&count, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    threads[device] = count;
  }
  return max_of(1, threads[device] / threads_per_block);
}
#endif

}  // namespace ops_common
