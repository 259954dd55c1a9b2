// LLTM: the CPU kernels of the pointwise stages (declared in lltm_cpu.h) over lltm.h's
// math. Each direction is one parallel loop (the vectorised math, in place on float rows,
// else over tiles: strided loads, math, stores) instead of a chain of temporaries;
// backward splits by feature so each task reduces its own share of the bias gradient, in
// order. A unit of its own: an edit of the schema, the composition or the autograd
// compiles no loop, and an edit of the math no host glue.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "common/cpu_dispatch.h"
#include "lltm.h"
#include "lltm_cpu.h"

namespace lltm {
namespace {

constexpr int64_t kTile = 64;
// Elements per task below which threading costs more than it saves (several
// transcendental functions per element make this smaller than ATen's GRAIN_SIZE).
constexpr int64_t kGrain = 8192;

// The math of n consecutive features of one row, on unit-stride arrays in the compute
// type: pre-activations z* (without bias) in, activated gates out in place. The capability
// tag of common/cpu_dispatch.h is unused: the loops are plain code the compiler vectorises.
template <typename Tag, typename T>
OPS_CPU_BODY void forward_math(Tag, T* __restrict zi, T* __restrict zo, T* __restrict zc,
                                    const T* __restrict bi, const T* __restrict bo,
                                    const T* __restrict bc, const T* __restrict old_cell,
                                    T* __restrict new_cell, T* __restrict h, int64_t n) {
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) {
    const auto r = cell_forward(zi[t] + bi[t], zo[t] + bo[t], zc[t] + bc[t], old_cell[t]);
    zi[t] = r.input_gate;
    zo[t] = r.output_gate;
    zc[t] = r.candidate;
    new_cell[t] = r.new_cell;
    h[t] = r.new_h;
  }
}

template <typename Tag, typename T>
OPS_CPU_BODY void backward_math(Tag, T* __restrict gi, T* __restrict go, T* __restrict gc,
                                     T* __restrict cell, const T* __restrict dh,
                                     const T* __restrict dcell, T* __restrict sum_i,
                                     T* __restrict sum_o, T* __restrict sum_c, int64_t n) {
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) {
    const auto r = cell_backward(gi[t], go[t], gc[t], cell[t], dh[t], dcell[t]);
    gi[t] = r.d_input;
    go[t] = r.d_output;
    gc[t] = r.d_candidate;
    cell[t] = r.d_old_cell;
    sum_i[t] += r.d_input;
    sum_o[t] += r.d_output;
    sum_c[t] += r.d_candidate;
  }
}

// The float loops are compiled once per CPU capability (common/cpu_dispatch.h): the
// baseline (SSE2) is 4x slower than AVX2. double rows run the plain loop (kPlain).
OPS_CPU_CLONES(forward_math_float, forward_math)
OPS_CPU_CLONES(backward_math_float, backward_math)
constexpr ops_common::CpuIsaTag<ops_common::CpuIsa::kBaseline> kPlain{};

template <typename T, typename... Rest>
void forward_run(T* zi, Rest... rest) {
  if constexpr (std::is_same_v<T, float>) return forward_math_float(zi, rest...);
  forward_math(kPlain, zi, rest...);
}

template <typename T, typename... Rest>
void backward_tile(T* gi, Rest... rest) {
  if constexpr (std::is_same_v<T, float>) return backward_math_float(gi, rest...);
  backward_math(kPlain, gi, rest...);
}

// The three gate blocks [input gate | output gate | candidate] of a row (of gates, their
// gradients or the bias), features [j0, j0 + n), to and from tiles i, o, c.
template <typename Row, typename Acc>
void load_gates(Row row, int64_t state, int64_t j0, int64_t n, Acc* i, Acc* o, Acc* c) {
  for (int64_t t = 0; t < n; ++t) {
    i[t] = Acc(row[j0 + t]);
    o[t] = Acc(row[state + j0 + t]);
    c[t] = Acc(row[2 * state + j0 + t]);
  }
}

template <typename Row, typename Acc>
void store_gates(Row row, int64_t state, int64_t j0, int64_t n, const Acc* i, const Acc* o,
                 const Acc* c) {
  using T = std::remove_reference_t<decltype(row[0])>;
  for (int64_t t = 0; t < n; ++t) {
    row[j0 + t] = T(i[t]);
    row[state + j0 + t] = T(o[t]);
    row[2 * state + j0 + t] = T(c[t]);
  }
}

// float and double rows with unit feature stride (the usual case: gates and the outputs are
// fresh contiguous buffers) run in place, a row at a time; other rows (16-bit types, strided
// bias or old_cell) go through tiles converted to the compute type.
template <typename scalar_t>
void forward_cpu_kernel(const at::Tensor& gates, const at::Tensor& bias,
                        const at::Tensor& old_cell, const at::Tensor& new_h,
                        const at::Tensor& new_cell) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t batch = new_h.size(0);
  const int64_t state = new_h.size(1);
  const int64_t grain = std::max<int64_t>(1, kGrain / state);
  if constexpr (std::is_same_v<scalar_t, opmath_t>) {
    if (gates.is_contiguous() && bias.stride(0) == 1 && old_cell.stride(1) == 1) {
      scalar_t* z = gates.mutable_data_ptr<scalar_t>();
      const scalar_t* b_ = bias.const_data_ptr<scalar_t>();
      const scalar_t* c0 = old_cell.const_data_ptr<scalar_t>();
      scalar_t* c1 = new_cell.mutable_data_ptr<scalar_t>();
      scalar_t* h1 = new_h.mutable_data_ptr<scalar_t>();
      const int64_t c0_row = old_cell.stride(0);
      at::parallel_for(0, batch, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          scalar_t* zb = z + b * 3 * state;
          forward_run(zb, zb + state, zb + 2 * state, b_, b_ + state, b_ + 2 * state,
                      c0 + b * c0_row, c1 + b * state, h1 + b * state, state);
        }
      });
      return;
    }
  }
  auto z = gates.accessor<scalar_t, 2>();
  auto b_ = bias.accessor<const scalar_t, 1>();
  auto c0 = old_cell.accessor<const scalar_t, 2>();
  auto h1 = new_h.accessor<scalar_t, 2>();
  auto c1 = new_cell.accessor<scalar_t, 2>();
  at::parallel_for(0, batch, grain, [&](int64_t begin, int64_t end) {
    opmath_t zi[kTile], zo[kTile], zc[kTile], bi[kTile], bo[kTile], bc[kTile], cell[kTile],
        next[kTile], h[kTile];
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t j0 = 0; j0 < state; j0 += kTile) {
        const int64_t n = std::min(kTile, state - j0);
        load_gates(z[b], state, j0, n, zi, zo, zc);
        load_gates(b_, state, j0, n, bi, bo, bc);
        for (int64_t t = 0; t < n; ++t) cell[t] = opmath_t(c0[b][j0 + t]);
        forward_run(zi, zo, zc, bi, bo, bc, cell, next, h, n);
        store_gates(z[b], state, j0, n, zi, zo, zc);
        for (int64_t t = 0; t < n; ++t) {
          c1[b][j0 + t] = scalar_t(next[t]);
          h1[b][j0 + t] = scalar_t(h[t]);
        }
      }
    }
  });
}

template <typename scalar_t>
at::Tensor backward_cpu_kernel(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                               const at::Tensor& new_cell, const at::Tensor& gates,
                               const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  auto d_bias = at::empty({3 * state}, new_cell.options());
  auto gh = grad_h.accessor<const scalar_t, 2>();
  auto gc = grad_cell.accessor<const scalar_t, 2>();
  auto c1 = new_cell.accessor<const scalar_t, 2>();
  auto g = gates.accessor<const scalar_t, 2>();
  auto dz = d_gates.accessor<scalar_t, 2>();
  auto dc0 = d_old_cell.accessor<scalar_t, 2>();
  auto db = d_bias.accessor<scalar_t, 1>();
  const int64_t grain = std::max<int64_t>(1, kGrain / batch);
  at::parallel_for(0, state, grain, [&](int64_t begin, int64_t end) {
    const int64_t width = end - begin;
    std::vector<opmath_t> sums(3 * width, opmath_t(0));
    opmath_t gi[kTile], go[kTile], gcand[kTile], cell[kTile], dh[kTile], dcell[kTile];
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j0 = begin; j0 < end; j0 += kTile) {
        const int64_t n = std::min(kTile, end - j0);
        load_gates(g[b], state, j0, n, gi, go, gcand);
        for (int64_t t = 0; t < n; ++t) {
          cell[t] = opmath_t(c1[b][j0 + t]);
          dh[t] = opmath_t(gh[b][j0 + t]);
          dcell[t] = opmath_t(gc[b][j0 + t]);
        }
        opmath_t* sum_i = sums.data() + (j0 - begin);
        backward_tile(gi, go, gcand, cell, dh, dcell, sum_i, sum_i + width, sum_i + 2 * width, n);
        store_gates(dz[b], state, j0, n, gi, go, gcand);
        for (int64_t t = 0; t < n; ++t) dc0[b][j0 + t] = scalar_t(cell[t]);
      }
    }
    store_gates(db, state, begin, width, sums.data(), sums.data() + width, sums.data() + 2 * width);
  });
  return d_bias;
}

}  // namespace

void forward_cpu_pointwise(const at::Tensor& gates, const at::Tensor& bias,
                           const at::Tensor& old_cell, const at::Tensor& new_h,
                           const at::Tensor& new_cell) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(),
                                  "lltm_forward_cpu", [&] {
    forward_cpu_kernel<scalar_t>(gates, bias, old_cell, new_h, new_cell);
  });
}

at::Tensor backward_cpu_pointwise(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                  const at::Tensor& new_cell, const at::Tensor& gates,
                                  const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  at::Tensor d_bias;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(),
                                  "lltm_backward_cpu", [&] {
    d_bias = backward_cpu_kernel<scalar_t>(grad_h, grad_cell, new_cell, gates, d_gates,
                                           d_old_cell);
  });
  return d_bias;
}

}  // namespace lltm
