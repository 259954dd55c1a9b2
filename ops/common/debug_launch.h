#pragma once
// What ops_common::launch (common/launch.h) does more in a debug build (OPS_DEBUG): before
// a launch it checks the launch against the device and the kernel (block and grid sizes,
// dynamic shared memory, registers) and every pointer argument (on the launching device,
// not a host pointer); after it, it waits for the kernel, so an illegal address or a
// device-side assert is raised by the op that launched the kernel, not by some later call
// (a stream being captured into a CUDA graph cannot wait, and is not waited for). A failed
// check returns an error as a failed launch would; launch_detail() says what failed, and
// OPS_CHECK_LAUNCH (common/cuda_host.h, stable_cuda_host.h) puts that in its message.
// Host code only (nvcc and the host compiler), never under NVRTC.
#include <cuda_runtime_api.h>
#include <cxxabi.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace ops_common {
namespace debug {

constexpr int kDetailBytes = 1024;

// One per thread; the launchers' TU and the host side's share it (an inline function's
// static is one object in the library).
inline char* detail_buffer() {
  static thread_local char text[kDetailBytes] = {};
  return text;
}

// " (<what the last failed launch check found>)", once; "" when nothing was noted.
inline const char* launch_detail() {
  static thread_local char out[kDetailBytes + 4];
  char* text = detail_buffer();
  if (text[0] == '\0') return "";
  std::snprintf(out, sizeof(out), " (%s)", text);
  text[0] = '\0';
  return out;
}

// The kernel's name, demangled where the runtime can say it.
inline void kernel_name(const void* stub, char* out, size_t size) {
  const char* mangled = nullptr;
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12030
  if (cudaFuncGetName(&mangled, stub) != cudaSuccess) mangled = nullptr;
#endif
  if (mangled == nullptr) {
    std::snprintf(out, size, "kernel %p", stub);
    return;
  }
  int status = 0;
  char* readable = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  const char* name = status == 0 && readable ? readable : mangled;
  if (std::strncmp(name, "void ", 5) == 0) name += 5;  // a template kernel's return type
  std::snprintf(out, size, "%s", name);
  std::free(readable);
}

// Note "<kernel>: <what>" for launch_detail; returns error.
inline cudaError_t refuse(cudaError_t error, const void* stub, const char* format, ...) {
  char name[384];
  kernel_name(stub, name, sizeof(name));
  char what[kDetailBytes];
  va_list args;
  va_start(args, format);
  std::vsnprintf(what, sizeof(what), format, args);
  va_end(args);
  std::snprintf(detail_buffer(), kDetailBytes, "debug build: launch of %s: %s", name, what);
  return error;
}

template <typename P>
cudaError_t check_pointer(const void* stub, int index, int device, const P& value) {
  if constexpr (std::is_pointer<P>::value) {
    if (value == nullptr) return cudaSuccess;
    cudaPointerAttributes where{};
    if (cudaPointerGetAttributes(&where, value) != cudaSuccess) {
      cudaGetLastError();
      where.type = cudaMemoryTypeUnregistered;
    }
    // Page-locked host memory mapped into the device's address space (cudaHostAlloc, a
    // flag the kernel sets for the host to read) is a valid kernel argument; pageable
    // memory and host memory without a device address are not.
    const bool mapped = where.type == cudaMemoryTypeHost && where.devicePointer != nullptr;
    if ((where.type == cudaMemoryTypeHost && !mapped) || where.type == cudaMemoryTypeUnregistered) {
      return refuse(cudaErrorInvalidValue, stub,
                    "argument %d (%p) is host memory, which the kernel cannot read", index,
                    static_cast<const void*>(value));
    }
    if (where.type == cudaMemoryTypeDevice && where.device != device) {
      return refuse(cudaErrorInvalidDevice, stub,
                    "argument %d lives on GPU %d, the kernel launches on GPU %d (a missing "
                    "device guard?)", index, where.device, device);
    }
  }
  return cudaSuccess;
}

template <typename... Params>
cudaError_t check_launch(const void* stub, dim3 grid, dim3 block, size_t shared_bytes,
                         const Params&... params) {
  detail_buffer()[0] = '\0';
  int device = 0;
  cudaGetDevice(&device);
  cudaFuncAttributes kernel{};
  if (cudaFuncGetAttributes(&kernel, stub) != cudaSuccess) {
    cudaGetLastError();
    return cudaSuccess;  // the launch itself reports what is wrong with the kernel
  }
  int max_x = 0, max_y = 0, max_z = 0;
  cudaDeviceGetAttribute(&max_x, cudaDevAttrMaxGridDimX, device);
  cudaDeviceGetAttribute(&max_y, cudaDevAttrMaxGridDimY, device);
  cudaDeviceGetAttribute(&max_z, cudaDevAttrMaxGridDimZ, device);
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > static_cast<unsigned long long>(kernel.maxThreadsPerBlock)) {
    return refuse(cudaErrorInvalidConfiguration, stub,
                  "a block of (%u,%u,%u) = %llu threads; this kernel takes 1 to %d (%d registers "
                  "per thread)", block.x, block.y, block.z, threads, kernel.maxThreadsPerBlock,
                  kernel.numRegs);
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > unsigned(max_x) ||
      grid.y > unsigned(max_y) || grid.z > unsigned(max_z)) {
    return refuse(cudaErrorInvalidConfiguration, stub,
                  "a grid of (%u,%u,%u) blocks; each size must be at least 1 and at most "
                  "(%d,%d,%d)", grid.x, grid.y, grid.z, max_x, max_y, max_z);
  }
  if (shared_bytes > size_t(kernel.maxDynamicSharedSizeBytes)) {
    return refuse(cudaErrorInvalidValue, stub,
                  "%zu bytes of dynamic shared memory; the kernel allows %d (raise it with "
                  "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ...))",
                  shared_bytes, kernel.maxDynamicSharedSizeBytes);
  }
  int index = 0;
  cudaError_t first = cudaSuccess;
  ((first = first == cudaSuccess ? check_pointer(stub, index, device, params) : first, ++index), ...);
  return first;
}

// The launch's result; in a debug build, the kernel's, once it has run.
inline cudaError_t finish(const void* stub, cudaStream_t stream, cudaError_t launched) {
  if (launched != cudaSuccess) {
    return refuse(launched, stub, "the launch failed");
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();
    return cudaSuccess;
  }
  if (capture != cudaStreamCaptureStatusNone) return cudaSuccess;
  const cudaError_t ran = cudaStreamSynchronize(stream);
  if (ran != cudaSuccess) {
    return refuse(ran, stub,
                  "the kernel failed while it ran; a debug build waits for each kernel, so "
                  "this is the op whose kernel failed");
  }
  return cudaSuccess;
}

}  // namespace debug
}  // namespace ops_common

// OPS_CHECK_LAUNCH of a debug build, with the ABI's check (TORCH_CHECK or STD_TORCH_CHECK):
// the CUDA error and what the launch check found.
#define OPS_DEBUG_CHECK_LAUNCH(CHECK, expr)                                                 \
  do {                                                                                      \
    const cudaError_t ops_launch_error_ = (expr);                                           \
    CHECK(ops_launch_error_ == cudaSuccess, "CUDA error: ", cudaGetErrorString(ops_launch_error_), \
          ::ops_common::debug::launch_detail());                                            \
  } while (0)
