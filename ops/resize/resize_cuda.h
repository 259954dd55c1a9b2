#pragma once
// Launchers of the CUDA kernels (resize_cuda.cu), torch-free: dense NCHW or NHWC buffers
// described by a Geometry, the two axis maps, the stream. Each returns cudaGetLastError().
#include <cuda_runtime_api.h>

#include "common/cuda_types.h"
#include "resize_types.h"

namespace resize_op {

#define RESIZE_DECLARE_LAUNCHERS(T, ACC)                                                  \
  cudaError_t launch_forward(const T* input, T* output, const Geometry& geometry,         \
                             const AxisMap<ACC>& rows, const AxisMap<ACC>& cols,          \
                             cudaStream_t stream);                                        \
  cudaError_t launch_backward(const T* grad_output, T* grad_input, const Geometry& geometry, \
                              const AxisMap<ACC>& rows, const AxisMap<ACC>& cols,         \
                              cudaStream_t stream);

RESIZE_DECLARE_LAUNCHERS(float, float)
RESIZE_DECLARE_LAUNCHERS(double, double)
RESIZE_DECLARE_LAUNCHERS(ops_common::half_t, float)
RESIZE_DECLARE_LAUNCHERS(ops_common::bfloat16_t, float)

#undef RESIZE_DECLARE_LAUNCHERS

}  // namespace resize_op
