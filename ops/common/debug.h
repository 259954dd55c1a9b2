#pragma once
// Checks a debug build compiles in and a release build compiles out: jit_loader.load(op,
// debug=True) (or JIT_LOADER_DEBUG=1) defines OPS_DEBUG. For kernels, CPU loops and the
// math shared by both; torch-free, and NVRTC compiles it (a kernel swap of a debug build
// keeps the checks).
//
//   OPS_ASSERT(cond)     cond must hold: in a kernel a failure is a device-side assert
//                        (file, line, block and thread, the condition), the launch fails
//                        and the op that launched it raises; on the CPU a std::logic_error.
//   OPS_INDEX(i, n)      i, checked to lie in [0, n): y[OPS_INDEX(i + 1, n)] = v; a
//                        failure prints the index expression and its value first.
//
// Neither evaluates anything in a release build, so conditions must have no side effects.
#include <cstdint>

#if defined(OPS_DEBUG) && !defined(__CUDACC_RTC__)
#include <cstdio>
#include <stdexcept>
#endif

#if defined(__CUDACC__)
#define OPS_DEBUG_HD __host__ __device__
#else
#define OPS_DEBUG_HD
#endif

namespace ops_common {
namespace debug {

#if defined(OPS_DEBUG)
// CUDA's device-side assert: a builtin under NVRTC, glibc's assert function under nvcc.
#if defined(__CUDACC_RTC__)
#define OPS_DEBUG_DEVICE_ASSERT_(what, file, line, function) __assertfail(what, file, line, function, 1)
#else
#define OPS_DEBUG_DEVICE_ASSERT_(what, file, line, function) __assert_fail(what, file, line, function)
#endif

// Out of line: the failure path stays out of the checked loop's registers.
OPS_DEBUG_HD __attribute__((noinline)) inline void fail(const char* condition, const char* file,
                                                        int line, const char* function) {
#if defined(__CUDA_ARCH__)
  OPS_DEBUG_DEVICE_ASSERT_(condition, file, line, function);
#else
  char text[512];
  std::snprintf(text, sizeof(text), "%s:%d: %s: assertion `%s` failed", file, line, function,
                condition);
  throw std::logic_error(text);
#endif
}

OPS_DEBUG_HD __attribute__((noinline)) inline void index_fail(const char* expression, int64_t value,
                                                              int64_t bound, const char* file,
                                                              int line, const char* function) {
#if defined(__CUDA_ARCH__)
  printf("%s:%d: index %s = %lld is outside [0, %lld) (block (%u,%u,%u), thread (%u,%u,%u))\n",
         file, line, expression, static_cast<long long>(value), static_cast<long long>(bound),
         blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  OPS_DEBUG_DEVICE_ASSERT_("index in bounds", file, line, function);
#else
  char text[512];
  std::snprintf(text, sizeof(text), "%s:%d: %s: index %s = %lld is outside [0, %lld)", file,
                line, function, expression, static_cast<long long>(value),
                static_cast<long long>(bound));
  throw std::out_of_range(text);
#endif
}

template <typename I, typename N>
OPS_DEBUG_HD inline I checked_index(I i, N n, const char* expression, const char* file, int line,
                                    const char* function) {
  if (!(int64_t(i) >= 0 && int64_t(i) < int64_t(n))) {
    index_fail(expression, int64_t(i), int64_t(n), file, line, function);
  }
  return i;
}
#endif

}  // namespace debug
}  // namespace ops_common

#if defined(OPS_DEBUG)
#define OPS_ASSERT(cond)                                                                     \
  ((cond) ? (void)0 : ::ops_common::debug::fail(#cond, __FILE__, __LINE__, __func__))
#define OPS_INDEX(i, n) ::ops_common::debug::checked_index((i), (n), #i, __FILE__, __LINE__, __func__)
#else
#define OPS_ASSERT(cond) ((void)0)
#define OPS_INDEX(i, n) (i)
#endif
