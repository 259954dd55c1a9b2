#pragma once
// Launch configuration shared by the CUDA kernels: grid size for grid-stride loops.
#include <ATen/cuda/CUDAContext.h>
#include <algorithm>
#include <cstdint>

namespace ops_common {

// Enough blocks to fill every SM a few times over; grid-stride loops cover the rest,
// so the grid never exceeds what one launch can address.
inline int grid_for(int64_t work_items, int threads_per_block, int blocks_per_sm = 8) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  const int64_t cap =
      static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * blocks_per_sm;
  return static_cast<int>(std::max<int64_t>(1, std::min(needed, cap)));
}

}  // namespace ops_common
