#pragma once
// Launch configuration for torch-free .cu files: grid sizes for grid-stride loops.
#include <algorithm>
#include <cstdint>

namespace ops_common {

// One block per threads_per_block work items, at most max_blocks (and never past what
// one launch can address); a grid-stride loop in the kernel covers the rest.
inline unsigned int grid_size(int64_t work_items, int threads_per_block,
                              int64_t max_blocks = INT32_MAX) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned int>(
      std::max<int64_t>(1, std::min({needed, max_blocks, int64_t(INT32_MAX)})));
}

}  // namespace ops_common
