// LLTM: schema, the host composition both backends share (checks, GEMMs, buffers), the CPU
// kernels and the autograd kernel. On CPU each direction's elementwise part is one
// parallel loop (the vectorised math of lltm.h, in place on float rows, else over tiles:
// strided loads, math, stores) instead of a chain of temporaries; backward splits by
// feature so each task reduces its own share of the bias gradient, in order. Autograd is
// C++ (a backward node of its own, LLTMBackward) because at the tutorial's size the cell is
// overhead-bound: a Python autograd kernel costs more than the fused forward itself.
// ATen, not the stable ABI: the stable ABI has no autograd, and the C++ autograd is the point.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/cpu_dispatch.h"
#include "lltm.h"
#include "lltm_compose.h"

namespace lltm {

ForwardShape check_forward(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& old_h,
                           const at::Tensor& old_cell) {
  constexpr const char* op = "lltm.forward";
  OP_CHECK_FLOATING(op, "input", input);
  OP_CHECK_DIM(op, "input", input, 2);
  OP_CHECK_DIM(op, "weights", weights, 2);
  OP_CHECK_DIM(op, "bias", bias, 1);
  OP_CHECK_DIM(op, "old_h", old_h, 2);
  OP_CHECK_DIM(op, "old_cell", old_cell, 2);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"weights", weights},
                                {"bias", bias}, {"old_h", old_h}, {"old_cell", old_cell}}) {
    OP_CHECK_SAME_DEVICE(op, name, t, "input", input);
    OP_CHECK_SAME_DTYPE(op, name, t, "input", input);
  }
  const int64_t batch = input.size(0);
  const int64_t features = input.size(1);
  const int64_t state = old_h.size(1);
  OP_CHECK_SIZE(op, "old_h", old_h, 0, batch);
  TORCH_CHECK(old_cell.sizes() == old_h.sizes(), op, ": old_cell must have the shape of old_h ",
              old_h.sizes(), ", got ", old_cell.sizes());
  TORCH_CHECK(weights.size(0) == 3 * state && weights.size(1) == state + features, op,
              ": weights must have shape (3 * state_size, state_size + input_features) = (",
              3 * state, ", ", state + features, ") for state_size ", state,
              " (old_h.size(1)) and input_features ", features, " (input.size(1)), got ",
              weights.sizes());
  TORCH_CHECK(bias.size(0) == 3 * state, op, ": bias must have shape (3 * state_size) = (",
              3 * state, ") for state_size ", state, " (old_h.size(1)), got ", bias.sizes());
  return {batch, features, state};
}

ForwardResult compose_forward(
    ForwardPointwise pointwise, const ForwardShape& shape, const at::Tensor& input,
    const at::Tensor& weights, const at::Tensor& bias, const at::Tensor& old_h,
    const at::Tensor& old_cell) {
  const auto [batch, features, state] = shape;
  auto hx = at::cat({old_h, input}, 1);
  auto gates = at::mm(hx, weights.t());
  auto new_h = at::empty({batch, state}, input.options());
  auto new_cell = at::empty({batch, state}, input.options());
  if (new_h.numel() > 0) {
    pointwise(gates, bias, old_cell, new_h, new_cell);
  }
  return {new_h, new_cell, gates, hx};
}

BackwardShape check_backward(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                             const at::Tensor& new_cell, const at::Tensor& gates,
                             const at::Tensor& hx, const at::Tensor& weights) {
  constexpr const char* op = "lltm.backward";
  OP_CHECK_FLOATING(op, "new_cell", new_cell);
  OP_CHECK_DIM(op, "new_cell", new_cell, 2);
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor&>{"grad_h", grad_h}, {"grad_cell", grad_cell},
        {"gates", gates}, {"hx", hx}, {"weights", weights}}) {
    OP_CHECK_DIM(op, name, t, 2);
    OP_CHECK_SAME_DEVICE(op, name, t, "new_cell", new_cell);
    OP_CHECK_SAME_DTYPE(op, name, t, "new_cell", new_cell);
  }
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  const int64_t features = hx.size(1) - state;
  TORCH_CHECK(grad_h.sizes() == new_cell.sizes() && grad_cell.sizes() == new_cell.sizes(), op,
              ": grad_h and grad_cell must have the shape of new_cell ", new_cell.sizes(),
              ", got ", grad_h.sizes(), " and ", grad_cell.sizes());
  OP_CHECK_SIZE(op, "gates", gates, 0, batch);
  OP_CHECK_SIZE(op, "gates", gates, 1, 3 * state);
  OP_CHECK_SIZE(op, "hx", hx, 0, batch);
  TORCH_CHECK(features >= 0, op, ": hx must have at least state_size = ", state,
              " columns, got shape ", hx.sizes());
  OP_CHECK_SIZE(op, "weights", weights, 0, 3 * state);
  OP_CHECK_SIZE(op, "weights", weights, 1, state + features);
  return {batch, features, state};
}

BackwardResult compose_backward(
    BackwardPointwise pointwise, const BackwardShape& shape, const at::Tensor& grad_h,
    const at::Tensor& grad_cell, const at::Tensor& new_cell, const at::Tensor& gates,
    const at::Tensor& hx, const at::Tensor& weights, std::array<bool, 5> output_mask) {
  const auto [batch, features, state] = shape;
  const auto [need_input, need_weights, need_bias, need_old_h, need_old_cell] = output_mask;
  auto d_gates = at::empty({batch, 3 * state}, new_cell.options());
  auto d_old_cell = at::empty({batch, state}, new_cell.options());
  auto d_bias = d_gates.numel() > 0
                    ? pointwise(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell)
                    : at::zeros({3 * state}, new_cell.options());
  return {need_input ? at::mm(d_gates, weights.narrow(1, state, features)) : at::Tensor(),
          need_weights ? at::mm(d_gates.t(), hx) : at::Tensor(),
          need_bias ? d_bias : at::Tensor(),
          need_old_h ? at::mm(d_gates, weights.narrow(1, 0, state)) : at::Tensor(),
          need_old_cell ? d_old_cell : at::Tensor()};
}

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
// baseline (SSE2) is 4x slower than AVX2.
OPS_CPU_CLONES(forward_math_float, forward_math)
OPS_CPU_CLONES(backward_math_float, backward_math)

template <typename T>
void forward_run(T* zi, T* zo, T* zc, const T* bi, const T* bo, const T* bc, const T* old_cell,
                 T* new_cell, T* h, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    forward_math_float(zi, zo, zc, bi, bo, bc, old_cell, new_cell, h, n);
  } else {
    forward_math(ops_common::CpuIsaTag<ops_common::CpuIsa::kBaseline>{}, zi, zo, zc, bi, bo, bc,
                 old_cell, new_cell, h, n);
  }
}

template <typename T>
void backward_tile(T* gi, T* go, T* gc, T* cell, const T* dh, const T* dcell, T* sum_i,
                   T* sum_o, T* sum_c, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    backward_math_float(gi, go, gc, cell, dh, dcell, sum_i, sum_o, sum_c, n);
  } else {
    backward_math(ops_common::CpuIsaTag<ops_common::CpuIsa::kBaseline>{}, gi, go, gc, cell, dh,
                  dcell, sum_i, sum_o, sum_c, n);
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
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = j0 + t;
          zi[t] = opmath_t(z[b][j]);
          zo[t] = opmath_t(z[b][state + j]);
          zc[t] = opmath_t(z[b][2 * state + j]);
          bi[t] = opmath_t(b_[j]);
          bo[t] = opmath_t(b_[state + j]);
          bc[t] = opmath_t(b_[2 * state + j]);
          cell[t] = opmath_t(c0[b][j]);
        }
        forward_run(zi, zo, zc, bi, bo, bc, cell, next, h, n);
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = j0 + t;
          z[b][j] = scalar_t(zi[t]);
          z[b][state + j] = scalar_t(zo[t]);
          z[b][2 * state + j] = scalar_t(zc[t]);
          c1[b][j] = scalar_t(next[t]);
          h1[b][j] = scalar_t(h[t]);
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
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = j0 + t;
          gi[t] = opmath_t(g[b][j]);
          go[t] = opmath_t(g[b][state + j]);
          gcand[t] = opmath_t(g[b][2 * state + j]);
          cell[t] = opmath_t(c1[b][j]);
          dh[t] = opmath_t(gh[b][j]);
          dcell[t] = opmath_t(gc[b][j]);
        }
        opmath_t* sum_i = sums.data() + (j0 - begin);
        backward_tile(gi, go, gcand, cell, dh, dcell, sum_i, sum_i + width, sum_i + 2 * width, n);
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = j0 + t;
          dz[b][j] = scalar_t(gi[t]);
          dz[b][state + j] = scalar_t(go[t]);
          dz[b][2 * state + j] = scalar_t(gcand[t]);
          dc0[b][j] = scalar_t(cell[t]);
        }
      }
    }
    for (int64_t t = 0; t < width; ++t) {
      db[begin + t] = scalar_t(sums[t]);
      db[state + begin + t] = scalar_t(sums[width + t]);
      db[2 * state + begin + t] = scalar_t(sums[2 * width + t]);
    }
  });
  return d_bias;
}

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

ForwardResult forward_cpu(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell) {
  const ForwardShape shape = check_forward(input, weights, bias, old_h, old_cell);
  return compose_forward(&forward_cpu_pointwise, shape, input, weights, bias, old_h, old_cell);
}

BackwardResult backward_cpu(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gates, const at::Tensor& hx, const at::Tensor& weights,
    std::array<bool, 5> output_mask) {
  const BackwardShape shape = check_backward(grad_h, grad_cell, new_cell, gates, hx, weights);
  return compose_backward(&backward_cpu_pointwise, shape, grad_h, grad_cell, new_cell, gates, hx,
                          weights, output_mask);
}

// The op's backward node, written as ATen's generated nodes are rather than as a
// torch::autograd::Function: the Function's generic bookkeeping (per-input metadata,
// output wrapping, the context's saved-data map) costs a third of a small cell's host
// time. Its outputs new_h and new_cell are differentiable; gates and hx are not.
struct LLTMBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable new_cell_, gates_, hx_, weights_;

  std::string name() const override { return "LLTMBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    new_cell_.reset_data();
    gates_.reset_data();
    hx_.reset_data();
    weights_.reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("lltm::backward", "")
                               .typed<BackwardResult(const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&, const at::Tensor&,
                                                     std::array<bool, 5>)>();
    std::lock_guard<std::mutex> lock(mutex_);
    // Grads are not materialised: an output left out of the loss has none.
    if (!grads[0].defined() && !grads[1].defined()) {
      return torch::autograd::variable_list(5);
    }
    const at::Tensor new_cell = new_cell_.unpack(getptr());
    const auto zero = [&] { return at::zeros({}, new_cell.options()).expand_as(new_cell); };
    const at::Tensor grad_h = grads[0].defined() ? grads[0] : zero();
    const at::Tensor grad_cell = grads[1].defined() ? grads[1] : zero();
    std::array<bool, 5> output_mask;
    for (size_t i = 0; i < output_mask.size(); ++i) {
      output_mask[i] = task_should_compute_output(i);
    }
    auto [d_input, d_weights, d_bias, d_old_h, d_old_cell] =
        op.call(grad_h, grad_cell, new_cell, gates_.unpack(), hx_.unpack(), weights_.unpack(),
                output_mask);
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }
};

// A new node of type T, owned as this torch's autograd owns nodes: a shared_ptr deleted by
// deleteNode (iteratively: a long chain of LLTM steps would overflow the stack) up to torch
// 2.11, an intrusive_ptr in later versions (Node::getptr() returns the owner's type).
using NodePtr = decltype(std::declval<torch::autograd::Node&>().getptr());

template <typename T, typename Base = torch::autograd::Node>
NodePtr make_node() {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Base>>) {
    // Unqualified and dependent on Base: found (by argument-dependent lookup) only in the
    // versions that take this branch.
    return std::shared_ptr<T>(new T(), [](Base* node) { deleteNode(node); });
  } else {
    return c10::make_intrusive<T>();
  }
}

ForwardResult forward_autograd(const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& old_h,
                               const at::Tensor& old_cell) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lltm::forward", "")
                             .typed<ForwardResult(const at::Tensor&, const at::Tensor&,
                                                  const at::Tensor&, const at::Tensor&,
                                                  const at::Tensor&)>();
  ForwardResult result = [&] {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(input, weights, bias, old_h, old_cell);
  }();
  if (!torch::autograd::compute_requires_grad(input, weights, bias, old_h, old_cell)) {
    return result;
  }
  const auto& [new_h, new_cell, gates, hx] = result;
  const NodePtr node = make_node<LLTMBackward>();
  auto& backward = static_cast<LLTMBackward&>(*node);
  backward.set_next_edges(
      torch::autograd::collect_next_edges(input, weights, bias, old_h, old_cell));
  torch::autograd::set_history(new_h, node);
  torch::autograd::set_history(new_cell, node);
  // After set_history: new_cell is then this node's output, saved without a reference cycle.
  backward.new_cell_ = torch::autograd::SavedVariable(new_cell, /*is_output=*/true);
  backward.gates_ = torch::autograd::SavedVariable(gates, /*is_output=*/false);
  backward.hx_ = torch::autograd::SavedVariable(hx, /*is_output=*/false);
  backward.weights_ = torch::autograd::SavedVariable(weights, /*is_output=*/false);
  return result;
}

}  // namespace
}  // namespace lltm

TORCH_LIBRARY(lltm, m) {
  m.def(
      "forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
      " -> (Tensor new_h, Tensor new_cell, Tensor gates, Tensor hx)");
  m.def(
      "backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor hx,"
      " Tensor weights, bool[5] output_mask)"
      " -> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h, Tensor d_old_cell)");
}

TORCH_LIBRARY_IMPL(lltm, CPU, m) {
  m.impl("forward", &lltm::forward_cpu);
  m.impl("backward", &lltm::backward_cpu);
}

TORCH_LIBRARY_IMPL(lltm, Autograd, m) {
  m.impl("forward", &lltm::forward_autograd);
}
