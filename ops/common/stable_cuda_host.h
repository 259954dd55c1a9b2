#pragma once
// Host side of a stable-ABI CUDA backend (an op's *_cuda.cpp), the twin of
// common/cuda_host.h: device guard, the current stream, and the storage types the
// torch-free launchers take for torch's scalar types (common/cuda_ptr.h).
#include <cuda_runtime_api.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/shim_utils.h>

#include "common/cuda_ptr.h"

// torch's shims declare their CUDA functions only where USE_CUDA is defined before their
// first inclusion, which the precompiled header set is not; these are the shims' own
// declarations (the functions exist in every CUDA build of torch).
extern "C" {
AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
AOTITorchError torch_c10_cuda_check_msg(int32_t err, const char* filename,
                                        const char* function_name, uint32_t line_number,
                                        bool include_device_assertions, char** error_msg);
void torch_c10_cuda_free_error_msg(char* error_msg);
}

namespace ops_common {

// torch::stable::accelerator::DeviceGuard, made only where the device is not current
// already. The stable guard is a heap object made through a shim call that first asks
// which accelerator torch has, a visible part of a small call's host time; most calls find
// their tensor's device current, and a guard there would switch nothing. The same shim
// calls as the stable guard's, where one is needed.
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device_index) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_index) {
      TORCH_ERROR_CODE_CHECK(aoti_torch_create_device_guard(device_index, &guard_));
    }
  }
  ~DeviceGuard() {
    if (guard_ != nullptr) aoti_torch_delete_device_guard(guard_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  DeviceGuardHandle guard_ = nullptr;
};

// torch's current stream on the tensor's device (the one a device guard made current).
inline cudaStream_t current_stream(const torch::stable::Tensor& t) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

}  // namespace ops_common

// A launcher returns cudaGetLastError() after its launches; this turns a failure into an
// error naming the CUDA error, as STD_CUDA_KERNEL_LAUNCH_CHECK does.
#if defined(OPS_DEBUG)  // a debug build's launch checks say what failed (common/debug_launch.h)
#include "common/debug_launch.h"
#define OPS_CHECK_LAUNCH(expr) OPS_DEBUG_CHECK_LAUNCH(STD_TORCH_CHECK, expr)
#else
#define OPS_CHECK_LAUNCH(expr) STD_CUDA_CHECK(expr)
#endif
