// LLTM: schema, the host composition both backends share (checks, GEMMs, buffers) and the
// autograd kernel; the CPU kernels of the pointwise stages are in lltm_cpu.cpp. Autograd is
// C++ (a backward node of its own, LLTMBackward) because at the tutorial's size the cell is
// overhead-bound: a Python autograd kernel costs more than the fused forward itself.
// ATen, not the stable ABI: the stable ABI has no autograd, and the C++ autograd is the point.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "common/checks.h"
#include "lltm_compose.h"
#include "lltm_cpu.h"

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
