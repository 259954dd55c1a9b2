#pragma once
// The CPU kernels of resize (resize_cpu.cpp), torch-free, for the host side in resize.cpp:
// dense NCHW or NHWC buffers described by a Geometry and the two axis maps (as the CUDA
// launchers of resize_cuda.h take them), on all of torch's threads. A torch error inside
// a task comes back as ops_common::CpuError.
#include "common/cpu_dispatch.h"
#include "resize_types.h"

namespace c10 {
struct Half;
struct BFloat16;
}  // namespace c10

namespace resize_op {

#define RESIZE_DECLARE_CPU_KERNELS(T, ACC)                                                    \
  void forward_cpu(const T* input, T* output, const Geometry& geometry,                      \
                   const AxisMap<ACC>& rows, const AxisMap<ACC>& cols);                      \
  void backward_cpu(const T* grad_output, T* grad_input, const Geometry& geometry,           \
                    const AxisMap<ACC>& rows, const AxisMap<ACC>& cols);

RESIZE_DECLARE_CPU_KERNELS(float, float)
RESIZE_DECLARE_CPU_KERNELS(double, double)
RESIZE_DECLARE_CPU_KERNELS(c10::Half, float)
RESIZE_DECLARE_CPU_KERNELS(c10::BFloat16, float)

#undef RESIZE_DECLARE_CPU_KERNELS

}  // namespace resize_op
