// scatter: the CPU kernels over scatter.h's math (declared in scatter_cpu.h). A unit of its
// own, so that an edit of the schema, the composition or the autograd compiles no kernel,
// and an edit of the math no host glue.
#include <ATen/ATen.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "scatter.h"
#include "scatter_cpu.h"

namespace scatter {
namespace {

// Runs f(b, lo, hi) for tasks that own disjoint ranges [lo, hi) of output rows of batch b:
// each scans every index of its b in order and takes the ones in its range, so the
// result is race-free and the same for any thread count (sums in index order, ties to
// the first position).
template <typename F>
void for_each_row_task(int64_t batches, int64_t rows, const F& f) {
  const int64_t threads = at::get_num_threads();
  const int64_t chunks = batches >= threads ? 1 : std::max<int64_t>(1, std::min(rows, threads));
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  at::parallel_for(0, batches * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t lo = (t % chunks) * rows_per_chunk;
      f(t / chunks, lo, std::min(rows, lo + rows_per_chunk));
    }
  });
}

template <typename scalar_t, Reduce R>
void reduce_cpu_kernel(const Problem& p, at::Tensor& work, at::Tensor& arg) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto [B, E, K, N] = p.shape;
  const scalar_t* src = p.src.const_data_ptr<scalar_t>();
  const int64_t* index = p.index.const_data_ptr<int64_t>();
  const IndexStrides s = p.strides;
  acc_t* w = work.mutable_data_ptr<acc_t>();
  int64_t* a = arg.defined() ? arg.mutable_data_ptr<int64_t>() : nullptr;
  const bool has_out = p.has_out;
  auto update = [&](acc_t* wk, int64_t* ak, acc_t v, int64_t e) {
    if constexpr (R == Reduce::kSum || R == Reduce::kMean) {
      *wk += v;
    } else if ((!has_out && *ak == E) || better<R>(v, *wk)) {
      *wk = v;
      *ak = e;
    }
  };
  for_each_row_task(B, N, [&](int64_t b, int64_t lo, int64_t hi) {
    for (int64_t e = 0; e < E; ++e) {
      const scalar_t* row = src + (b * E + e) * K;
      if (s.k == 0) {
        const int64_t n = index_at(index, s, b, e, 0);
        if (n < lo || n >= hi) continue;
        acc_t* wr = w + (b * N + n) * K;
        int64_t* ar = a ? a + (b * N + n) * K : nullptr;
        for (int64_t k = 0; k < K; ++k) update(wr + k, ar ? ar + k : nullptr, acc_t(row[k]), e);
      } else {
        for (int64_t k = 0; k < K; ++k) {
          const int64_t n = index_at(index, s, b, e, k);
          if (n < lo || n >= hi) continue;
          const int64_t o = (b * N + n) * K + k;
          update(w + o, a ? a + o : nullptr, acc_t(row[k]), e);
        }
      }
    }
  });
}

void count_cpu(const Problem& p, at::Tensor& count) {
  const auto [B, E, K, N] = p.shape;
  const int64_t Kc = p.count_k;
  const int64_t* index = p.index.const_data_ptr<int64_t>();
  int64_t* c = count.mutable_data_ptr<int64_t>();
  for_each_row_task(p.count_b, N, [&](int64_t b, int64_t lo, int64_t hi) {
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t k = 0; k < Kc; ++k) {
        const int64_t n = index_at(index, p.strides, b, e, k);
        if (n >= lo && n < hi) ++c[(b * N + n) * Kc + k];
      }
    }
  });
}

// t (contiguous, CPU) filled with value: in place by the host itself below ATen's grain
// size, where fill_'s trip through the dispatcher costs more than the fill.
template <typename T>
void fill_cpu(at::Tensor& t, T value) {
  if (t.numel() >= at::internal::GRAIN_SIZE) {
    t.fill_(value);
  } else if (value == T(0)) {
    std::memset(t.data_ptr(), 0, t.nbytes());
  } else {
    std::fill_n(t.mutable_data_ptr<T>(), t.numel(), value);
  }
}

}  // namespace

bool run_cpu(const Problem& p, at::Tensor& work, at::Tensor& arg, at::Tensor& count) {
  if (!p.has_out) fill_cpu(work, 0);  // zero bits are zero in every dtype of work
  if (arg.defined()) fill_cpu<int64_t>(arg, p.shape.E);
  if (count.defined()) {
    fill_cpu<int64_t>(count, 0);
    count_cpu(p, count);
  }
  AT_DISPATCH_V2(p.src.scalar_type(), "scatter_cpu", AT_WRAP([&] {
    with_reduce(p.reduce, [&](auto r) {
      reduce_cpu_kernel<scalar_t, decltype(r)::value>(p, work, arg);
    });
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
  return false;
}

}  // namespace scatter
