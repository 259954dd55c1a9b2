#pragma once
// Host side shared by the CPU backend (scatter.cpp, scatter_cpu.cpp) and the CUDA backend
// (scatter_cuda.cpp): argument checks, index broadcasting and the composition around a
// backend's kernels, which scatter.cpp implements once.
#include <ATen/ATen.h>

#include <optional>
#include <string_view>
#include <tuple>

#include "scatter_types.h"

namespace scatter {

// One call, normalised to the [B, E, K] view of scatter.h.
struct Problem {
  Reduce reduce;
  int64_t dim;
  Shape shape;
  at::Tensor src;         // contiguous, read as [B, E, K] (its own shape is src's)
  at::Tensor index;       // int64, contiguous, read as [Bc, Ei, Kc] (strides below); its own
                          // shape is the broadcast index's (index_3d views it as that)
  IndexStrides strides;   // of index over [B, E, K]; 0 where broadcast
  int64_t count_b;        // Bc: 1 when the index is broadcast over B, else B
  int64_t index_e;        // Ei: 1 when the index is broadcast along dim, else E
  int64_t count_k;        // Kc: likewise over K
  bool has_out;           // work starts from out's values, which take part
  bool deterministic;     // the caller asked for it, or torch's deterministic mode is on
  std::optional<bool> index_sorted;  // sortedness along dim, where known
  bool want_arg;          // max/min: the caller (or backward) reads arg
  bool check_in_run;      // dim_size given and check_bounds: a backend may check on the way
};

// The index as the [Bc, Ei, Kc] tensor it is read as (a view: a dispatcher call, so only
// where a tensor op needs the three dimensions).
inline at::Tensor index_3d(const Problem& p) {
  return p.index.view({p.count_b, p.index_e, p.count_k});
}

struct Backend {
  // Bounds check for a given dim_size (and the sortedness promise index_sorted=True).
  void (*check_index)(const Problem& p);
  // Fills work (read as [B, N, K], the accumulation dtype, contiguous; out's values when
  // has_out, else uninitialised), arg (read as [B, N, K], int64, max/min) and count
  // ([Bc, N, Kc] int64, mean; uninitialised). Returns true when work already holds the mean (else the
  // composition divides the sums by the counts).
  bool (*run)(const Problem& p, at::Tensor& work, at::Tensor& arg, at::Tensor& count);
  // Whether inferring dim_size should also detect sortedness (it is free there).
  bool uses_sortedness;
};

// scatter::reduce: a new output of src's shape with dim_size at dim; returns (out, aux),
// aux = arg for max/min (an empty tensor if !compute_arg), count for mean, an empty tensor
// for sum. With !want_aux those empty tensors are not made (aux is then undefined).
std::tuple<at::Tensor, at::Tensor> reduce_with(const Backend& backend, const at::Tensor& src,
                                               const at::Tensor& index, int64_t dim,
                                               std::optional<int64_t> dim_size,
                                               std::string_view reduce,
                                               std::optional<bool> index_sorted,
                                               bool deterministic, bool check_bounds,
                                               bool compute_arg, bool want_aux = true);

// scatter::sum: reduce_with's out for sum with the default options (sortedness unknown,
// deterministic only in torch's deterministic mode, bounds checked); no aux.
at::Tensor sum_with(const Backend& backend, const at::Tensor& src, const at::Tensor& index,
                    int64_t dim, std::optional<int64_t> dim_size);

// scatter::reduce_: accumulates into out in place; returns aux.
at::Tensor reduce_into_with(const Backend& backend, at::Tensor& out, const at::Tensor& src,
                            const at::Tensor& index, int64_t dim, std::string_view reduce,
                            std::optional<bool> index_sorted, bool deterministic,
                            bool check_bounds, bool compute_arg);

}  // namespace scatter
