#pragma once
// The CPU kernels of resize (resize_cpu.cpp), for the host side in resize.cpp: each runs
// one plan over contiguous buffers in the plan's memory format, on all threads, for float,
// double, c10::Half and c10::BFloat16.
#include "resize_host.h"

namespace resize_op {

template <typename scalar_t>
void forward_cpu_kernel(const scalar_t* in, scalar_t* out, const Plan& plan);

template <typename scalar_t>
void backward_cpu_kernel(const scalar_t* grad_out, scalar_t* grad_in, const Plan& plan);

}  // namespace resize_op
