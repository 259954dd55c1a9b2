#pragma once
// Kernels swapped into a live process (jit_tools/swap/kernels.py): a table, one per op library,
// of the kernels its launchers started and, for some, a replacement compiled by NVRTC from
// an edited .cu and loaded with the CUDA driver. ops_common::launch consults it only once
// the loader has switched it on for the library (jit_loader_kernel_swap_enable); until
// then a launch costs one relaxed load more than cudaLaunchKernel.
// Once the loaded sources are newer than the library's own kernels, the loader sets a
// compile function (jit_loader_kernel_swap_pending): a launch of a kernel with no
// replacement for the current device then asks it for one (NVRTC compiles that
// instantiation) instead of running the library's stale kernel, and fails if it gets none.
// Host code only (nvcc): NVRTC never sees it.
#include <cuda_runtime_api.h>

namespace ops_common {
namespace kernel_swap {

constexpr int kMaxKernels = 1024;

struct Entry {
  const void* kernel;   // the launcher's kernel (its host stub)
  void* replacement;    // a CUfunction, or null: the kernel itself
  int device;           // the device whose context holds replacement
};

// Returns a CUfunction of the current context of device for the kernel named mangled
// (compiled from the loaded sources), or null when it cannot.
using CompileFn = void* (*)(const char* mangled, int device);

struct Table {
  int enabled;
  int count;            // entries[0, count) are published
  int writing;          // spin lock of the writers
  CompileFn compile;    // set while the library's own kernels are stale
  Entry entries[kMaxKernels];
};

// Hidden: every op library has its own table, whichever libraries a process loads.
__attribute__((visibility("hidden"))) inline Table table{};

inline bool enabled() { return __atomic_load_n(&table.enabled, __ATOMIC_RELAXED) != 0; }

// The entry of kernel, recorded on its first launch; null when the table is full.
inline Entry* entry_for(const void* kernel) {
  int n = __atomic_load_n(&table.count, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; ++i) {
    if (table.entries[i].kernel == kernel) return &table.entries[i];
  }
  while (__atomic_exchange_n(&table.writing, 1, __ATOMIC_ACQUIRE)) {
  }
  n = table.count;
  Entry* found = nullptr;
  for (int i = 0; i < n && found == nullptr; ++i) {
    if (table.entries[i].kernel == kernel) found = &table.entries[i];
  }
  if (found == nullptr && n < kMaxKernels) {
    found = &table.entries[n];
    found->kernel = kernel;
    found->replacement = nullptr;
    found->device = -1;
    __atomic_store_n(&table.count, n + 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&table.writing, 0, __ATOMIC_RELEASE);
  return found;
}

using LaunchFn = int (*)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shared, cudaStream_t stream, void** params,
                         void** extra);

// cuLaunchKernel through the runtime's driver entry point: no link against libcuda.
inline LaunchFn driver_launch() {
  static const LaunchFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return LaunchFn(nullptr);
    }
    return reinterpret_cast<LaunchFn>(p);
  }();
  return fn;
}

// What a launch of kernel runs (the kernel recorded on its first launch).
enum class Use { kKernel, kReplacement, kNone };

// The replacement of kernel on the current device (Use::kReplacement, in *f); the kernel
// itself (Use::kKernel); or nothing (Use::kNone): its own code is stale and no
// replacement could be made, so the launch must fail rather than run it.
inline Use replacement_for(const void* kernel, void** f) {
  const CompileFn compile = __atomic_load_n(&table.compile, __ATOMIC_ACQUIRE);
  Entry* e = entry_for(kernel);
  if (e == nullptr) return compile == nullptr ? Use::kKernel : Use::kNone;  // the table is full
  *f = __atomic_load_n(&e->replacement, __ATOMIC_ACQUIRE);
  if (*f == nullptr && compile == nullptr) return Use::kKernel;
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return compile == nullptr ? Use::kKernel : Use::kNone;
  if (*f != nullptr && device == __atomic_load_n(&e->device, __ATOMIC_ACQUIRE)) {
    return Use::kReplacement;
  }
  if (compile == nullptr) return Use::kKernel;
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) != cudaSuccess || name == nullptr) return Use::kNone;
  *f = compile(name, device);
  if (*f == nullptr) return Use::kNone;
  __atomic_store_n(&e->replacement, nullptr, __ATOMIC_RELEASE);
  __atomic_store_n(&e->device, device, __ATOMIC_RELEASE);
  __atomic_store_n(&e->replacement, *f, __ATOMIC_RELEASE);
  return Use::kReplacement;
}

inline cudaError_t launch_replacement(void* f, dim3 grid, dim3 block, size_t shared_bytes,
                                      cudaStream_t stream, void** args) {
  const LaunchFn fn = driver_launch();
  if (fn == nullptr) return cudaErrorNotSupported;
  // CUresult and cudaError_t share the values of the errors a launch returns.
  const int result = fn(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                        static_cast<unsigned>(shared_bytes), stream, args, nullptr);
  const cudaError_t last = cudaGetLastError();
  return result != 0 ? static_cast<cudaError_t>(result) : last;
}

}  // namespace kernel_swap
}  // namespace ops_common

// C entry points of every op library with CUDA kernels, for jit_tools/swap/kernels.py. Weak:
// each .cu of a library defines them, the link keeps one.
extern "C" {

// Switch the table on (1) or off (0); off also drops every replacement and the compile
// function.
__attribute__((weak)) int jit_loader_kernel_swap_enable(int on) {
  using ops_common::kernel_swap::table;
  if (!on) {
    __atomic_store_n(&table.compile, nullptr, __ATOMIC_RELEASE);
    const int n = __atomic_load_n(&table.count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; ++i) __atomic_store_n(&table.entries[i].replacement, nullptr, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&table.enabled, on ? 1 : 0, __ATOMIC_RELEASE);
  return 1;
}

// While compile is set (null: no longer), a kernel with no replacement for the current
// device gets one from compile at its next launch, or that launch fails: the library's own
// kernels are older than the sources the loader loaded. Switches the table on.
__attribute__((weak)) int jit_loader_kernel_swap_pending(ops_common::kernel_swap::CompileFn compile) {
  using ops_common::kernel_swap::table;
  __atomic_store_n(&table.compile, compile, __ATOMIC_RELEASE);
  if (compile != nullptr) __atomic_store_n(&table.enabled, 1, __ATOMIC_RELEASE);
  return 1;
}

// How many kernels the library launched since the table was switched on.
__attribute__((weak)) int jit_loader_kernel_count() {
  return __atomic_load_n(&ops_common::kernel_swap::table.count, __ATOMIC_ACQUIRE);
}

// The mangled name of the i-th kernel launched (the symbol nvcc gave it), or null.
__attribute__((weak)) const char* jit_loader_kernel_name(int i) {
  using ops_common::kernel_swap::table;
  if (i < 0 || i >= __atomic_load_n(&table.count, __ATOMIC_ACQUIRE)) return nullptr;
  const char* name = nullptr;
  return cudaFuncGetName(&name, table.entries[i].kernel) == cudaSuccess ? name : nullptr;
}

// Launch function (a CUfunction of the current context of device) in place of the kernel
// named mangled; a null function restores the kernel. 1 when the kernel was found.
__attribute__((weak)) int jit_loader_kernel_replace(const char* mangled, void* function,
                                                    int device) {
  using ops_common::kernel_swap::table;
  const int n = __atomic_load_n(&table.count, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; ++i) {
    const char* name = nullptr;
    if (cudaFuncGetName(&name, table.entries[i].kernel) == cudaSuccess && name != nullptr &&
        __builtin_strcmp(name, mangled) == 0) {
      __atomic_store_n(&table.entries[i].replacement, nullptr, __ATOMIC_RELEASE);
      __atomic_store_n(&table.entries[i].device, device, __ATOMIC_RELEASE);
      __atomic_store_n(&table.entries[i].replacement, function, __ATOMIC_RELEASE);
      return 1;
    }
  }
  return 0;
}

}  // extern "C"
