#pragma once
// Launch configuration shared by the CUDA kernels: grid size for grid-stride loops.
#include <ATen/cuda/CUDAContext.h>
#include <algorithm>
#include <cstdint>

namespace ops_common {

// One block per threads_per_block work items, at most max_blocks (and never past what one
// launch can address); grid-stride loops cover the rest.
inline int grid_for(int64_t work_items, int threads_per_block, int64_t max_blocks = INT32_MAX) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min({needed, max_blocks, int64_t(INT32_MAX)})));
}

// Blocks that fit on the device at once (resident_per_sm blocks on every SM).
inline int64_t resident_blocks(int resident_per_sm) {
  return int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * resident_per_sm;
}

}  // namespace ops_common
