#pragma once
// Host side of a CUDA backend (an op's *_cuda.cpp): the stream and device guard, and the
// storage types that torch-free launchers take for ATen's scalar types (common/cuda_ptr.h).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/cuda_ptr.h"

namespace ops_common {

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace ops_common

// A launcher returns cudaGetLastError() after its launches; this turns a failure into a
// c10::Error naming the CUDA error, as C10_CUDA_KERNEL_LAUNCH_CHECK does.
#if defined(OPS_DEBUG)  // a debug build's launch checks say what failed (common/debug_launch.h)
#include "common/debug_launch.h"
#define OPS_CHECK_LAUNCH(expr) OPS_DEBUG_CHECK_LAUNCH(TORCH_CHECK, expr)
#else
#define OPS_CHECK_LAUNCH(expr) C10_CUDA_CHECK(expr)
#endif
