#pragma once
// Scatter reductions, shared by the CPU kernels (scatter_cpu.cpp) and the CUDA kernels
// (scatter_cuda.cu); torch-free. Every problem is seen as three dimensions:
//   src   [B, E, K]  contiguous; E = src.size(dim), B and K the dimensions before and after
//   out   [B, N, K]  N = dim_size
//   index element (b, e, k) at b * stride.b + e * stride.e + k * stride.k, a stride of 0
//         along each dimension the index is broadcast over (the PyG case: a 1-D index of
//         edges at dim 0 of [E, K] features has strides {0, 1, 0}).
// out[b, index(b, e, k), k] gathers src[b, e, k] under the reduction.
#include <cstdint>
#include <type_traits>

#include "common/host_device.h"
#include "scatter_types.h"

namespace scatter {

OPS_HOST_DEVICE int64_t index_at(const int64_t* index, const IndexStrides& s, int64_t b,
                                 int64_t e, int64_t k) {
  return index[b * s.b + e * s.e + k * s.k];
}

// First position p in [0, E) with index(b, p, k) >= value, for an index sorted along e.
// On an unsorted index it still returns a position in [0, E], so a kernel that trusts a
// wrong sortedness promise reads and writes only in bounds.
OPS_HOST_DEVICE int64_t lower_bound(const int64_t* index, const IndexStrides& s, int64_t b,
                                    int64_t k, int64_t E, int64_t value) {
  int64_t lo = 0, hi = E;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (index_at(index, s, b, mid, k) < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Whether v replaces the current extreme: strictly better, so among equal values the
// first position (and, when out is given, out's own value) wins, on every backend.
template <Reduce R, typename T>
OPS_HOST_DEVICE bool better(T v, T best) {
  return R == Reduce::kMax ? v > best : v < best;
}

// f(std::integral_constant<Reduce, reduce>{}): the reduction as a compile-time constant,
// so that each kernel is compiled once per kind (host code: the dispatch of a call).
template <typename F>
void with_reduce(Reduce reduce, F&& f) {
  switch (reduce) {
    case Reduce::kSum: f(std::integral_constant<Reduce, Reduce::kSum>{}); break;
    case Reduce::kMean: f(std::integral_constant<Reduce, Reduce::kMean>{}); break;
    case Reduce::kMax: f(std::integral_constant<Reduce, Reduce::kMax>{}); break;
    case Reduce::kMin: f(std::integral_constant<Reduce, Reduce::kMin>{}); break;
  }
}

}  // namespace scatter
