#pragma once
// Scatter reductions: the types the host side and the kernels share (torch-free): the
// reduction kinds, the [B, E, K] -> [B, N, K] view of a problem and the index's strides
// (scatter.h says how), the error record of the CUDA bounds check. The math over them is
// in scatter.h.
#include <cstdint>

namespace scatter {

enum class Reduce : int { kSum = 0, kMean = 1, kMax = 2, kMin = 3 };

struct Shape {
  int64_t B, E, K, N;
};

struct IndexStrides {
  int64_t b, e, k;
};

// Error record of the CUDA bounds check that runs without a host sync: the kernel writes
// the first bad index it meets into host-mapped memory, the host reads it later.
enum class IndexErrorKind : int { kNone = 0, kOutOfRange = 1, kNotSorted = 2 };

struct IndexError {
  int flag;  // 0 = nothing recorded; set once with atomicCAS
  int kind;  // IndexErrorKind
  long long value;
  long long position;
  long long dim_size;
};

}  // namespace scatter
