#pragma once
// The CPU backend's kernels of scatter (scatter_cpu.cpp), for the host composition in
// scatter.cpp (scatter_host.h's Backend::run).
#include "scatter_host.h"

namespace scatter {

// Fills work, arg and count of a checked problem on all threads, deterministically (sums
// in index order, ties to the first position); returns false: the composition divides
// the sums of a mean.
bool run_cpu(const Problem& p, at::Tensor& work, at::Tensor& arg, at::Tensor& count);

}  // namespace scatter
