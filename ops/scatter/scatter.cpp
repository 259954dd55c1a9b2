// scatter: schema, the host composition both backends share (checks, torch_scatter's index
// broadcasting, dim_size inference, finalisation) and the autograd kernels; the CPU
// kernels are in scatter_cpu.cpp. Autograd is a torch::autograd::Function in C++, as in PyTorch Geometric's
// torch_scatter, registered for the Autograd key, so the op is differentiable from Python,
// TorchScript and C++ alike.
// ATen, not the stable ABI: the stable ABI has no autograd, and the C++ autograd is the point.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <string>
#include <vector>

#include "common/checks.h"
#include "scatter_cpu.h"
#include "scatter_host.h"

namespace scatter {
namespace {

constexpr const char* kOp = "scatter";

Reduce parse_reduce(std::string_view reduce) {
  if (reduce == "sum" || reduce == "add") return Reduce::kSum;
  if (reduce == "mean") return Reduce::kMean;
  if (reduce == "max") return Reduce::kMax;
  if (reduce == "min") return Reduce::kMin;
  TORCH_CHECK(false, kOp, ": reduce must be one of \"sum\", \"mean\", \"max\", \"min\", got \"",
              std::string(reduce), "\"");
  return Reduce::kSum;
}

bool supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

// torch_scatter's broadcast: a 1-D index lies along dim; a shorter index gains trailing
// dimensions; every dimension of size 1 repeats. Returns the index with src's rank (sizes
// 1 or src's), not yet expanded.
at::Tensor unsqueeze_index(const at::Tensor& index, const at::Tensor& src, int64_t dim) {
  TORCH_CHECK(index.dim() >= 1 && index.dim() <= src.dim(), kOp,
              ": index must have between 1 and src.dim() = ", src.dim(), " dimensions, got ",
              index.dim(), "-D with shape ", index.sizes());
  at::Tensor u = index;
  if (u.dim() == 1) {
    for (int64_t i = 0; i < dim; ++i) u = u.unsqueeze(0);
  }
  while (u.dim() < src.dim()) u = u.unsqueeze(-1);
  for (int64_t i = 0; i < src.dim(); ++i) {
    TORCH_CHECK(u.size(i) == src.size(i) || u.size(i) == 1, kOp, ": index of shape ",
                index.sizes(), " cannot be broadcast to src of shape ", src.sizes(),
                " along dim ", dim, " (as index of shape ", u.sizes(), "; torch_scatter's rule: ",
                "a 1-D index lies along dim, missing trailing dimensions and sizes of 1 repeat)");
  }
  return u;
}

struct Prepared {
  Problem problem;
  std::vector<int64_t> out_sizes;
};

Prepared prepare(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                 std::optional<int64_t> dim_size, std::string_view reduce, bool has_out,
                 std::optional<bool> index_sorted, bool deterministic) {
  Problem p;
  p.reduce = parse_reduce(reduce);
  TORCH_CHECK(supported_dtype(src.scalar_type()), kOp,
              ": src must be float, double, half, bfloat16, int32 or int64, got ",
              src.scalar_type());
  TORCH_CHECK(index.scalar_type() == at::kLong, kOp,
              ": index must be an int64 (torch.long) tensor, got ", index.scalar_type());
  OP_CHECK_SAME_DEVICE(kOp, "index", index, "src", src);
  TORCH_CHECK(src.dim() >= 1, kOp, ": src must have at least one dimension, got a 0-D tensor");
  TORCH_CHECK(dim >= -src.dim() && dim < src.dim(), kOp, ": dim must be in [", -src.dim(), ", ",
              src.dim() - 1, "] for src of shape ", src.sizes(), ", got ", dim);
  dim = dim < 0 ? dim + src.dim() : dim;
  TORCH_CHECK(!dim_size || *dim_size >= 0, kOp, ": dim_size must be >= 0, got ", *dim_size);
  p.dim = dim;

  at::Tensor u = unsqueeze_index(index, src, dim);
  // Collapse to [Bc, E or 1, Kc]: the dimensions before dim must be all broadcast or all
  // full (likewise after dim), else those are expanded (materialised) first.
  std::vector<int64_t> target(u.sizes().begin(), u.sizes().end());
  auto settle = [&](int64_t lo, int64_t hi) {
    bool all_one = true, all_full = true;
    for (int64_t i = lo; i < hi; ++i) {
      all_one &= u.size(i) == 1;
      all_full &= u.size(i) == src.size(i);
    }
    if (!all_one && !all_full) {
      for (int64_t i = lo; i < hi; ++i) target[i] = src.size(i);
    }
  };
  settle(0, dim);
  settle(dim + 1, src.dim());
  if (u.sizes() != at::IntArrayRef(target)) u = u.expand(target);  // an expand is a dispatcher call
  u = u.contiguous();

  int64_t B = 1, K = 1, Bc = 1, Kc = 1;
  for (int64_t i = 0; i < dim; ++i) {
    B *= src.size(i);
    Bc *= u.size(i);
  }
  for (int64_t i = dim + 1; i < src.dim(); ++i) {
    K *= src.size(i);
    Kc *= u.size(i);
  }
  const int64_t E = src.size(dim);
  const int64_t Ei = u.size(dim);
  // Bc is 1 or B (and Kc 1 or K), except where B (K) is 1 anyway.
  p.count_b = Bc == B ? B : 1;
  p.count_k = Kc == K ? K : 1;
  // No views of [Bc, Ei, Kc] and [B, E, K]: the kernels read the contiguous data by the
  // sizes and strides below, and a view is a dispatcher call (index_3d makes one on demand).
  p.index = u;
  p.index_e = Ei;
  p.strides = {Bc == 1 ? 0 : Ei * Kc, Ei == 1 ? 0 : Kc, Kc == 1 ? 0 : 1};
  p.src = src.contiguous();
  p.shape = {B, E, K, dim_size.value_or(-1)};
  p.has_out = has_out;
  p.deterministic = deterministic || at::globalContext().deterministicAlgorithms();
  p.index_sorted = index_sorted;

  std::vector<int64_t> out_sizes(src.sizes().begin(), src.sizes().end());
  return {p, out_sizes};
}

std::string describe_position(const Problem& p, int64_t flat) {
  const int64_t k = flat % p.count_k;
  const int64_t be = flat / p.count_k;
  return "(b=" + std::to_string(be / p.shape.E) + ", e=" + std::to_string(be % p.shape.E) +
         ", k=" + std::to_string(k) + ") of the index viewed as [before dim, dim, after dim]";
}

// The index's extremes and, if asked, whether it descends anywhere along dim, in one
// transfer: this is the host sync that inferring dim_size costs.
struct IndexSummary {
  int64_t min, max;
  bool sorted;
};

// A small index on the CPU (below ATen's grain size, where its own reductions run on one
// thread as well) in one pass over its data ([Bc, Ei, Kc], contiguous): the route below is
// six dispatcher calls, more host time than a whole scatter of a small graph.
IndexSummary summarise_small_cpu(const Problem& p, bool want_sorted) {
  const int64_t* v = p.index.const_data_ptr<int64_t>();
  const int64_t n = p.index.numel(), Ei = p.index_e, Kc = p.count_k;
  int64_t mn = v[0], mx = v[0];
  for (int64_t i = 1; i < n; ++i) {
    mn = v[i] < mn ? v[i] : mn;
    mx = v[i] > mx ? v[i] : mx;
  }
  bool sorted = want_sorted;
  for (int64_t i = Kc; sorted && i < n; ++i) {
    // i - Kc is the previous position along dim, unless i starts a new row of Ei x Kc.
    sorted = (i % (Ei * Kc)) < Kc || v[i] >= v[i - Kc];
  }
  return {mn, mx, sorted};
}

IndexSummary summarise(const Problem& p, bool want_sorted) {
  if (p.index.is_cpu() && p.index.numel() < at::internal::GRAIN_SIZE) {
    return summarise_small_cpu(p, want_sorted);
  }
  const at::Tensor idx = index_3d(p);
  auto [mn, mx] = at::aminmax(idx);
  std::vector<at::Tensor> parts{mn.view({1}), mx.view({1})};
  if (want_sorted) {
    const int64_t Ei = idx.size(1);
    at::Tensor descends = Ei > 1 ? (idx.narrow(1, 1, Ei - 1) < idx.narrow(1, 0, Ei - 1)).any()
                                 : at::zeros({}, idx.options().dtype(at::kBool));
    parts.push_back(descends.to(at::kLong).view({1}));
  }
  const at::Tensor host = at::cat(parts).cpu();
  const int64_t* v = host.const_data_ptr<int64_t>();
  return {v[0], v[1], want_sorted ? v[2] == 0 : false};
}

void raise_out_of_range(const Problem& p, int64_t value) {
  TORCH_CHECK(false, kOp, ": index out of range: found ", value, ", but indices must be in [0, ",
              p.shape.N, ")", " (dim_size ", p.shape.N, ")");
}

// Shared by the CPU backend and by both backends when dim_size is inferred.
void check_index_on_host(const Problem& p) {
  if (p.index.numel() == 0) return;
  const bool verify_sorted = p.index_sorted.value_or(false);
  const IndexSummary s = summarise(p, verify_sorted);
  if (s.min < 0) raise_out_of_range(p, s.min);
  if (s.max >= p.shape.N) raise_out_of_range(p, s.max);
  TORCH_CHECK(!verify_sorted || s.sorted, kOp,
              ": index_sorted=True, but index is not sorted (non-decreasing) along dim ", p.dim);
}

void infer_dim_size(const Backend& backend, Problem& p, bool check_bounds) {
  if (p.index.numel() == 0 || p.shape.E == 0) {
    p.shape.N = 0;
    return;
  }
  const bool want_sorted = backend.uses_sortedness && p.index_sorted != false;
  const IndexSummary s = summarise(p, want_sorted);
  TORCH_CHECK(!check_bounds || s.min >= 0, kOp, ": index out of range: found ", s.min,
              ", but indices must be >= 0");
  p.shape.N = s.max + 1;
  if (want_sorted) {
    TORCH_CHECK(!check_bounds || !p.index_sorted.value_or(false) || s.sorted, kOp,
                ": index_sorted=True, but index is not sorted (non-decreasing) along dim ", p.dim);
    p.index_sorted = s.sorted;
  }
}

at::ScalarType work_dtype(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

// Runs the backend on a prepared problem: work starts as `initial` (out's values) or
// uninitialised; returns (work, aux). Without `initial`, work and arg are allocated with
// out_sizes (the result's shape: no view afterwards), else as [B, N, K].
std::tuple<at::Tensor, at::Tensor> run_problem(const Backend& backend, Problem& p,
                                               const at::Tensor& initial,
                                               at::IntArrayRef out_sizes) {
  const auto [B, E, K, N] = p.shape;
  const auto opts = p.src.options();
  const std::array<int64_t, 3> bnk{B, N, K};
  const at::IntArrayRef sizes = p.has_out ? at::IntArrayRef(bnk) : out_sizes;
  at::Tensor work;
  if (p.has_out) {
    // In place where out is contiguous in the accumulation dtype, else a converted copy.
    work = initial.reshape(sizes).to(work_dtype(initial.scalar_type())).contiguous();
  } else {
    work = at::empty(sizes, opts.dtype(work_dtype(p.src.scalar_type())));
  }
  at::Tensor arg, count;
  if (p.reduce == Reduce::kMax || p.reduce == Reduce::kMin) {
    arg = at::empty(sizes, opts.dtype(at::kLong));
  } else if (p.reduce == Reduce::kMean) {
    count = at::empty({p.count_b, N, p.count_k}, opts.dtype(at::kLong));
  }
  bool mean_done = false;
  if (work.numel() == 0) {
    mean_done = true;
    if (count.defined()) count.zero_();
  } else if (E == 0 || p.index.numel() == 0) {
    if (!p.has_out) work.zero_();
    if (arg.defined()) arg.fill_(E);
    if (count.defined()) count.zero_();
    mean_done = true;  // the mean of nothing added to out is out itself
  } else {
    mean_done = backend.run(p, work, arg, count);
  }
  if (p.reduce == Reduce::kMean && !mean_done) {
    // count is [Bc, N, Kc]: it broadcasts against work as [B, N, K].
    const at::Tensor divisor = count.clamp_min(1).to(work.scalar_type());
    if (at::isIntegralType(work.scalar_type(), false)) {
      work = at::div(work.view(bnk), divisor, "floor").view(sizes);
    } else {
      work.view(bnk).div_(divisor);
    }
  }
  return {work, arg.defined() ? arg : count};  // undefined for sum
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> reduce_with(const Backend& backend, const at::Tensor& src,
                                               const at::Tensor& index, int64_t dim,
                                               std::optional<int64_t> dim_size,
                                               std::string_view reduce,
                                               std::optional<bool> index_sorted,
                                               bool deterministic, bool check_bounds,
                                               bool compute_arg, bool want_aux) {
  auto [p, out_sizes] = prepare(src, index, dim, dim_size, reduce, false, index_sorted,
                                deterministic);
  p.want_arg = compute_arg;
  p.check_in_run = dim_size.has_value() && check_bounds;
  if (dim_size) {
    if (check_bounds) backend.check_index(p);
  } else {
    infer_dim_size(backend, p, check_bounds);
  }
  out_sizes[p.dim] = p.shape.N;
  auto [work, aux] = run_problem(backend, p, at::Tensor(), out_sizes);
  at::Tensor out = work.scalar_type() == src.scalar_type() ? work : work.to(src.scalar_type());
  const bool extreme = p.reduce == Reduce::kMax || p.reduce == Reduce::kMin;
  if (want_aux && (!aux.defined() || (extreme && !compute_arg))) {
    aux = at::empty({0}, src.options().dtype(at::kLong));
  }
  return {out, aux};
}

at::Tensor sum_with(const Backend& backend, const at::Tensor& src, const at::Tensor& index,
                    int64_t dim, std::optional<int64_t> dim_size) {
  return std::get<0>(reduce_with(backend, src, index, dim, dim_size, "sum", std::nullopt, false,
                                 true, false, /*want_aux=*/false));
}

at::Tensor reduce_into_with(const Backend& backend, at::Tensor& out, const at::Tensor& src,
                            const at::Tensor& index, int64_t dim, std::string_view reduce,
                            std::optional<bool> index_sorted, bool deterministic,
                            bool check_bounds, bool compute_arg) {
  auto [p, out_sizes] = prepare(src, index, dim, 0, reduce, true, index_sorted, deterministic);
  p.want_arg = compute_arg;
  p.check_in_run = check_bounds;
  OP_CHECK_SAME_DEVICE(kOp, "out", out, "src", src);
  OP_CHECK_SAME_DTYPE(kOp, "out", out, "src", src);
  TORCH_CHECK(out.dim() == src.dim(), kOp, ": out must have the rank of src (", src.dim(),
              "), got shape ", out.sizes());
  for (int64_t i = 0; i < src.dim(); ++i) {
    TORCH_CHECK(i == p.dim || out.size(i) == src.size(i), kOp, ": out of shape ", out.sizes(),
                " must match src of shape ", src.sizes(), " in every dimension but dim ", p.dim);
  }
  p.shape.N = out.size(p.dim);
  if (check_bounds) backend.check_index(p);
  auto [work, aux] = run_problem(backend, p, out, out.sizes());
  out.copy_(work.view(out.sizes()));
  if (!aux.defined() || ((p.reduce == Reduce::kMax || p.reduce == Reduce::kMin) && !compute_arg)) {
    return at::empty({0}, src.options().dtype(at::kLong));
  }
  return p.reduce == Reduce::kMax || p.reduce == Reduce::kMin ? aux.view(out.sizes()) : aux;
}

namespace {

// --- CPU backend ---------------------------------------------------------------------------

// The kernels are in scatter_cpu.cpp; the bounds check is the host's own.
const Backend kCpuBackend{&check_index_on_host, &run_cpu, false};

std::tuple<at::Tensor, at::Tensor> reduce_cpu(const at::Tensor& src, const at::Tensor& index,
                                              int64_t dim, std::optional<int64_t> dim_size,
                                              c10::string_view reduce,
                                              std::optional<bool> index_sorted,
                                              bool deterministic, bool check_bounds,
                                              bool compute_arg) {
  return reduce_with(kCpuBackend, src, index, dim, dim_size, reduce, index_sorted, deterministic,
                     check_bounds, compute_arg);
}

at::Tensor reduce_into_cpu(at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                           int64_t dim, c10::string_view reduce, std::optional<bool> index_sorted,
                           bool deterministic, bool check_bounds, bool compute_arg) {
  return reduce_into_with(kCpuBackend, out, src, index, dim, reduce, index_sorted, deterministic,
                          check_bounds, compute_arg);
}

at::Tensor sum_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                   std::optional<int64_t> dim_size) {
  return sum_with(kCpuBackend, src, index, dim, dim_size);
}

void check_errors_cpu(const at::Tensor&) {}

// --- autograd ---------------------------------------------------------------------------

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// torch_scatter's broadcast of index to src's shape, as an expanded view (no copy).
at::Tensor broadcast_index(const at::Tensor& index, at::IntArrayRef src_sizes, int64_t dim) {
  at::Tensor u = index;
  if (u.dim() == 1) {
    for (int64_t i = 0; i < dim; ++i) u = u.unsqueeze(0);
  }
  while (u.dim() < static_cast<int64_t>(src_sizes.size())) u = u.unsqueeze(-1);
  return u.expand(src_sizes);
}

void save_state(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                const at::Tensor& aux, int64_t dim, Reduce reduce) {
  const int64_t d = dim < 0 ? dim + src.dim() : dim;
  ctx->saved_data["dim"] = d;
  ctx->saved_data["reduce"] = static_cast<int64_t>(reduce);
  ctx->saved_data["src_sizes"] = src.sizes().vec();
  // Only what backward reads: the index for sum and mean, plus the counts for mean; the
  // arg positions for max and min.
  if (reduce == Reduce::kSum) {
    ctx->save_for_backward({index});
  } else if (reduce == Reduce::kMean) {
    ctx->save_for_backward({index, aux});
  } else {
    ctx->save_for_backward({aux});
  }
}

struct Grads {
  at::Tensor src, out;
};

// Gradients of src and of out's values before the call. sum: grad gathered at each
// element's index; mean: the same divided by the count; max/min: grad goes to the arg
// position (the sentinel E lands in an extra slice that is cut off), and to out's own
// value where it stayed the extreme (arg == E).
Grads scatter_backward(AutogradContext* ctx, const at::Tensor& grad, bool need_src,
                       bool need_out) {
  const int64_t dim = ctx->saved_data["dim"].toInt();
  const auto reduce = static_cast<Reduce>(ctx->saved_data["reduce"].toInt());
  const std::vector<int64_t> src_sizes = ctx->saved_data["src_sizes"].toIntVector();
  const auto saved = ctx->get_saved_variables();
  Grads g;
  if (reduce == Reduce::kSum || reduce == Reduce::kMean) {
    at::Tensor scaled = grad;
    if (reduce == Reduce::kMean) {
      const at::Tensor& count = saved[1];
      int64_t B = 1, K = 1;
      for (int64_t i = 0; i < dim; ++i) B *= grad.size(i);
      for (int64_t i = dim + 1; i < grad.dim(); ++i) K *= grad.size(i);
      scaled = (grad.reshape({B, grad.size(dim), K}) / count.clamp_min(1)).view(grad.sizes());
    }
    if (need_src) g.src = scaled.gather(dim, broadcast_index(saved[0], src_sizes, dim));
    if (need_out) g.out = scaled;
  } else {
    const at::Tensor& arg = saved[0];
    const int64_t E = src_sizes[dim];
    if (need_src) {
      std::vector<int64_t> padded = src_sizes;
      padded[dim] += 1;
      g.src = at::zeros(padded, grad.options()).scatter(dim, arg, grad).narrow(dim, 0, E);
    }
    if (need_out) g.out = grad.masked_fill(arg != E, 0);
  }
  return g;
}

using ReduceFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    int64_t, std::optional<int64_t>,
                                                    c10::string_view, std::optional<bool>, bool,
                                                    bool, bool);
using ReduceIntoFn = at::Tensor(at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                c10::string_view, std::optional<bool>, bool, bool, bool);

// scatter::reduce at the backend's kernel, below autograd.
std::tuple<at::Tensor, at::Tensor> reduce_below_autograd(
    const at::Tensor& src, const at::Tensor& index, int64_t dim, std::optional<int64_t> dim_size,
    c10::string_view reduce, std::optional<bool> index_sorted, bool deterministic,
    bool check_bounds, bool compute_arg) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("scatter::reduce", "")
                             .typed<ReduceFn>();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(src, index, dim, dim_size, reduce, index_sorted, deterministic, check_bounds,
                 compute_arg);
}

class ScatterFunction : public torch::autograd::Function<ScatterFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                               int64_t dim, std::optional<int64_t> dim_size, std::string reduce,
                               std::optional<bool> index_sorted, bool deterministic,
                               bool check_bounds, bool compute_arg) {
    // Backward of max/min needs arg even where the caller does not. (Grad mode is off
    // inside forward; requires_grad says whether backward can run.)
    const bool need_arg = compute_arg || src.requires_grad();
    auto [out, aux] = reduce_below_autograd(src, index, dim, dim_size, reduce, index_sorted,
                                            deterministic, check_bounds, need_arg);
    save_state(ctx, src, index, aux, dim, parse_reduce(reduce));
    ctx->mark_non_differentiable({aux});
    ctx->set_materialize_grads(false);
    return {out, aux};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad_src;
    if (grads[0].defined()) {
      grad_src = scatter_backward(ctx, grads[0], ctx->needs_input_grad(0), false).src;
    }
    return {grad_src, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class ScatterIntoFunction : public torch::autograd::Function<ScatterIntoFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, at::Tensor out, const at::Tensor& src,
                               const at::Tensor& index, int64_t dim, std::string reduce,
                               std::optional<bool> index_sorted, bool deterministic,
                               bool check_bounds, bool compute_arg) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("scatter::reduce_", "")
                               .typed<ReduceIntoFn>();
    const bool need_arg = compute_arg || src.requires_grad() || out.requires_grad();
    at::Tensor aux;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      aux = op.call(out, src, index, dim, reduce, index_sorted, deterministic, check_bounds,
                    need_arg);
    }
    // The kernel wrote into out below the ADInplaceOrView key: count the write, so that
    // tensors saved from out's old value fail autograd's version check, as after any
    // in-place op.
    out.unsafeGetTensorImpl()->bump_version();
    save_state(ctx, src, index, aux, dim, parse_reduce(reduce));
    ctx->mark_dirty({out});
    ctx->mark_non_differentiable({aux});
    ctx->set_materialize_grads(false);
    return {out, aux};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Grads g;
    if (grads[0].defined()) {
      g = scatter_backward(ctx, grads[0], ctx->needs_input_grad(1), ctx->needs_input_grad(0));
    }
    return {g.out, g.src, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// scatter::sum at the backend's kernel, below autograd.
at::Tensor sum_below_autograd(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                              std::optional<int64_t> dim_size) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("scatter::sum", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, std::optional<int64_t>)>();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(src, index, dim, dim_size);
}

class ScatterSumFunction : public torch::autograd::Function<ScatterSumFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                               int64_t dim, std::optional<int64_t> dim_size) {
    at::Tensor out = sum_below_autograd(src, index, dim, dim_size);
    save_state(ctx, src, index, at::Tensor(), dim, Reduce::kSum);
    ctx->set_materialize_grads(false);
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad_src;
    if (grads[0].defined()) {
      grad_src = scatter_backward(ctx, grads[0], ctx->needs_input_grad(0), false).src;
    }
    return {grad_src, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor sum_autograd(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size) {
  if (!at::GradMode::is_enabled() || !src.requires_grad()) {
    return sum_below_autograd(src, index, dim, dim_size);
  }
  return ScatterSumFunction::apply(src, index, dim, dim_size)[0];
}

std::tuple<at::Tensor, at::Tensor> reduce_autograd(const at::Tensor& src, const at::Tensor& index,
                                                   int64_t dim, std::optional<int64_t> dim_size,
                                                   c10::string_view reduce,
                                                   std::optional<bool> index_sorted,
                                                   bool deterministic, bool check_bounds,
                                                   bool compute_arg) {
  if (!at::GradMode::is_enabled() || !src.requires_grad()) {
    // Nothing to record: straight to the kernel, without the Function's bookkeeping (most
    // of the host time of a call on a small graph).
    return reduce_below_autograd(src, index, dim, dim_size, reduce, index_sorted, deterministic,
                                 check_bounds, compute_arg);
  }
  auto r = ScatterFunction::apply(src, index, dim, dim_size, std::string(reduce), index_sorted,
                                  deterministic, check_bounds, compute_arg);
  return {r[0], r[1]};
}

at::Tensor reduce_into_autograd(at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                                int64_t dim, c10::string_view reduce,
                                std::optional<bool> index_sorted, bool deterministic,
                                bool check_bounds, bool compute_arg) {
  return ScatterIntoFunction::apply(out, src, index, dim, std::string(reduce), index_sorted,
                                    deterministic, check_bounds, compute_arg)[1];
}

}  // namespace
}  // namespace scatter

TORCH_LIBRARY(scatter, m) {
  m.def(
      "reduce(Tensor src, Tensor index, int dim=-1, int? dim_size=None, str reduce=\"sum\", "
      "bool? index_sorted=None, bool deterministic=False, bool check_bounds=True, "
      "bool compute_arg=True) -> (Tensor out, Tensor aux)");
  m.def(
      "reduce_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1, str reduce=\"sum\", "
      "bool? index_sorted=None, bool deterministic=False, bool check_bounds=True, "
      "bool compute_arg=True) -> Tensor aux");
  // The common call, torch_scatter's scatter_sum with the default options, as its own op:
  // four arguments to parse and one result to wrap, against reduce's nine and two, most of
  // the host time of a scatter over a small graph.
  m.def("sum(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor");
  m.def("check_errors(Tensor device_of) -> ()");
}

TORCH_LIBRARY_IMPL(scatter, CPU, m) {
  m.impl("reduce", &scatter::reduce_cpu);
  m.impl("sum", &scatter::sum_cpu);
  m.impl("reduce_", &scatter::reduce_into_cpu);
  m.impl("check_errors", &scatter::check_errors_cpu);
}

TORCH_LIBRARY_IMPL(scatter, Autograd, m) {
  m.impl("reduce", &scatter::reduce_autograd);
  m.impl("sum", &scatter::sum_autograd);
  m.impl("reduce_", &scatter::reduce_into_autograd);
}
