// The loader's autograd kernel for an op whose backward is itself an op, registered at
// the Autograd key from Python through ctypes (jit_tools/autograd.py). Built once per
// exact torch build as a shared piece (jit_tools/builder/shared.py): the stable ABI has no
// autograd API, and torch.library.register_autograd runs Python on every call.
//
// The spec is declarative: the backward op, its arguments as references (the grad of
// output i, input i, output i, the sizes of input i), and which forward input receives
// each of its outputs. Forward: with no input needing grad it redispatches below
// autograd at once; otherwise it records a Node that calls the backward op from the top
// of the dispatcher, so the backward op's own autograd (double backward) applies.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymInt.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <cstring>
#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
// std::shared_ptr<Node> up to torch 2.13, c10::intrusive_ptr<Node> from 2.14 on.
using NodePtr = decltype(torch::autograd::Edge::function);

enum class Ref { Grad, Input, Output, Sizes, Size };

struct Arg {
  Ref ref;
  int index;                 // which output (Grad, Output) or input (the rest)
  int64_t start = 0;         // Sizes: dims [start, stop); Size: the dim
  int64_t stop = INT64_MAX;  // Python slice bounds, negative from the end
  bool symbolic = false;     // the backward op takes SymInt: sizes stay symbolic
};

struct Spec {
  std::string forward;  // ns::name[.overload], for messages and the node's name
  std::optional<c10::OperatorHandle> backward;  // as registered: for the checks below
  c10::OperatorName backward_name{"", ""};
  std::vector<Arg> args;
  std::vector<int> gives;          // backward output j -> forward input index (or -1)
  std::vector<int> edge_of_input;  // forward input index -> edge index (-1: not a tensor)
  std::vector<int> tensor_inputs;  // forward inputs that are Tensor or Tensor?
  size_t num_inputs = 0, num_outputs = 0, num_edges = 0;
};

int64_t wrap_dim(int64_t d, int64_t rank) {
  return d < 0 ? d + rank : d;
}

c10::SymInt size_value(const c10::SymInt& s, bool symbolic) {
  // An `int` argument of the backward op takes a concrete value: guard as Python's
  // argument parser does for a SymInt passed where an int is declared.
  return symbolic ? s : c10::SymInt(s.guard_int(__FILE__, __LINE__));
}

// The value a Sizes or Size reference stands for, from the forward input's sizes.
c10::IValue sizes_value(const Arg& a, const at::Tensor& t, const Spec& spec) {
  auto sizes = t.sym_sizes();
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (a.ref == Ref::Size) {
    const int64_t d = wrap_dim(a.start, rank);
    TORCH_CHECK(d >= 0 && d < rank, spec.forward, ": the backward op's argument takes dim ",
                a.start, " of input ", a.index, ", which has ", rank, " dims");
    return c10::IValue(size_value(sizes[d], a.symbolic));
  }
  const int64_t lo = std::clamp(wrap_dim(a.start, rank), int64_t(0), rank);
  const int64_t hi = a.stop == INT64_MAX ? rank : std::clamp(wrap_dim(a.stop, rank), int64_t(0), rank);
  std::vector<c10::SymInt> out;
  for (int64_t d = lo; d < hi; ++d) out.push_back(size_value(sizes[d], a.symbolic));
  return c10::IValue(out);
}

struct BackwardNode : public Node {
  explicit BackwardNode(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {
    // Slot k holds what argument k of the backward op needs.
    saved_.resize(spec_->args.size());
    values_.resize(spec_->args.size());
    from_saved_.assign(spec_->args.size(), false);
  }

  std::string name() const override {
    return "JitLoaderAutogradBackward[" + spec_->forward + "]";
  }

  void release_variables() override {
    for (auto& s : saved_) s.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    const Spec& spec = *spec_;
    variable_list result(spec.num_edges);
    bool wanted = false;
    for (int input : spec.gives) {
      if (input >= 0 && task_should_compute_output(spec.edge_of_input[input])) wanted = true;
    }
    if (!wanted) return result;
    // As an autograd.Function materialises them: an output nobody used gets a zero grad.
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) grads[i] = input_metadata(i).zeros_like();
    }
    torch::jit::Stack stack;
    stack.reserve(spec.args.size());
    for (size_t k = 0; k < spec.args.size(); ++k) {
      const Arg& a = spec.args[k];
      if (a.ref == Ref::Grad) {
        stack.emplace_back(grads[a.index]);
      } else if (a.ref == Ref::Output) {
        stack.emplace_back(saved_[k].unpack(getptr()));
      } else if (from_saved_[k]) {
        stack.emplace_back(saved_[k].unpack());
      } else {
        stack.push_back(values_[k]);
      }
    }
    // Looked up per call (a hash lookup): a reload that changes the backward op's schema
    // frees its old operator entry, and a graph recorded before may still run backward.
    auto backward = c10::Dispatcher::singleton().findSchema(spec.backward_name);
    TORCH_CHECK(backward.has_value(), spec.forward, ": its backward op ", spec.backward_name,
                " is no longer registered (the op was reloaded without it)");
    backward->callBoxed(stack);
    TORCH_INTERNAL_ASSERT(stack.size() == spec.gives.size());
    for (size_t j = 0; j < spec.gives.size(); ++j) {
      const int input = spec.gives[j];
      if (input < 0) continue;
      const int edge = spec.edge_of_input[input];
      if (task_should_compute_output(edge) && !stack[j].isNone()) result[edge] = stack[j].toTensor();
    }
    return result;
  }

  std::shared_ptr<const Spec> spec_;
  std::vector<SavedVariable> saved_;
  std::vector<c10::IValue> values_;
  std::vector<bool> from_saved_;  // slot k is a tensor input, in saved_[k]
};

template <class T>
NodePtr make_node(std::shared_ptr<const Spec> spec) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>) {
    // deleteNode through a dependent call: torch 2.14 no longer declares it.
    return std::shared_ptr<T>(new T(std::move(spec)), [](auto* node) { deleteNode(node); });
  } else {
    return c10::make_intrusive<T>(std::move(spec));
  }
}

struct AutogradKernel final : public c10::OperatorKernel {
  explicit AutogradKernel(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const Spec& spec = *spec_;
    auto args = torch::jit::last(*stack, spec.num_inputs);
    bool needs_grad = false;
    const bool grad_mode = at::GradMode::is_enabled();
    for (int i : spec.tensor_inputs) {
      const c10::IValue& v = args[i];
      if (!v.isTensor()) continue;
      const at::Tensor& t = v.toTensor();
      // A tangent would be dropped without a word: no jvp is declared.
      TORCH_CHECK(!torch::autograd::isFwGradDefined(t), spec.forward, ": argument ", i,
                  " is a dual tensor, but forward-mode AD is not supported (register_autograd_op "
                  "declares no jvp)");
      needs_grad = needs_grad || (grad_mode && t.requires_grad());
    }
    if (!needs_grad) {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
      return;
    }
    std::vector<c10::IValue> inputs(args.begin(), args.end());
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    }
    auto outputs = torch::jit::last(*stack, spec.num_outputs);

    NodePtr node = make_node<BackwardNode>(spec_);
    auto* backward = static_cast<BackwardNode*>(node.get());
    torch::autograd::edge_list edges(spec.num_edges);
    for (int i : spec.tensor_inputs) {
      if (inputs[i].isTensor()) edges[spec.edge_of_input[i]] = torch::autograd::impl::gradient_edge(inputs[i].toTensor());
    }
    node->set_next_edges(std::move(edges));
    for (const c10::IValue& out : outputs) {
      const at::Tensor& t = out.toTensor();
      if (t.defined() && !torch::autograd::isDifferentiableType(t.scalar_type())) {
        node->add_input_metadata(Node::undefined_input());
        continue;
      }
      torch::autograd::set_history(t, node);
    }
    // Saved after set_history: an output is saved without its grad_fn (no cycle).
    for (size_t k = 0; k < spec.args.size(); ++k) {
      const Arg& a = spec.args[k];
      if (a.ref == Ref::Output) {
        backward->saved_[k] = SavedVariable(outputs[a.index].toTensor(), /*is_output=*/true);
      } else if (a.ref == Ref::Input && inputs[a.index].isTensor()) {
        backward->from_saved_[k] = true;
        backward->saved_[k] = SavedVariable(inputs[a.index].toTensor(), /*is_output=*/false);
      } else if (a.ref == Ref::Input) {
        backward->values_[k] = inputs[a.index];
      } else if (a.ref != Ref::Grad) {
        backward->values_[k] = sizes_value(a, inputs[a.index].toTensor(), spec);
      }
    }
  }

  std::shared_ptr<const Spec> spec_;
};

bool takes_symint(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::SymIntType) return true;
  if (auto opt = type->cast<c10::OptionalType>()) return takes_symint(opt->getElementType());
  if (auto list = type->cast<c10::ListType>()) return takes_symint(list->getElementType());
  return false;
}

bool is_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType()->kind() == c10::TypeKind::TensorType;
  return false;
}

c10::OperatorHandle find_op(const std::string& qualname, const char* role) {
  const auto dot = qualname.find('.', qualname.find("::"));
  const std::string name = qualname.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : qualname.substr(dot + 1);
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload == "default" ? "" : overload});
  TORCH_CHECK(handle.has_value(), "register_autograd_op: ", role, " op '", qualname,
              "' is not registered with the dispatcher");
  return *handle;
}

// Spec text, one item per line:
//   forward <ns::op[.overload]>
//   backward <ns::op[.overload]>
//   gives <forward input index or -1> ...   (one per backward output)
//   grad <output> | output <output> | input <input> | sizes <input> <start> <stop|end> | size <input> <dim>
std::shared_ptr<Spec> parse_spec(const std::string& text, std::optional<c10::OperatorHandle>& forward) {
  auto spec = std::make_shared<Spec>();
  std::istringstream lines(text);
  std::string line, word;
  std::vector<int> gives;
  bool have_gives = false;
  std::string forward_name;
  std::vector<Arg> args;
  std::string backward_name;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    if (!(in >> word)) continue;
    if (word == "forward") {
      in >> forward_name;
    } else if (word == "backward") {
      in >> backward_name;
    } else if (word == "gives") {
      have_gives = true;
      int k;
      while (in >> k) gives.push_back(k);
    } else {
      Arg a;
      if (word == "grad") a.ref = Ref::Grad;
      else if (word == "output") a.ref = Ref::Output;
      else if (word == "input") a.ref = Ref::Input;
      else if (word == "sizes") a.ref = Ref::Sizes;
      else if (word == "size") a.ref = Ref::Size;
      else TORCH_CHECK(false, "register_autograd_op: unknown spec item '", word, "' in line '", line, "'");
      TORCH_CHECK(static_cast<bool>(in >> a.index), "register_autograd_op: spec line '", line, "' has no index");
      if (a.ref == Ref::Sizes) {
        std::string stop;
        in >> a.start >> stop;
        a.stop = stop == "end" ? INT64_MAX : std::stoll(stop);
      } else if (a.ref == Ref::Size) {
        in >> a.start;
      }
      args.push_back(a);
    }
  }
  TORCH_CHECK(!forward_name.empty() && !backward_name.empty() && have_gives,
              "register_autograd_op: the spec needs forward, backward and gives lines, got:\n", text);
  forward = find_op(forward_name, "forward");
  spec->forward = forward_name;
  spec->backward = find_op(backward_name, "backward");
  spec->backward_name = spec->backward->operator_name();
  const auto& fs = forward->schema();
  const auto& bs = spec->backward->schema();
  spec->num_inputs = fs.arguments().size();
  spec->num_outputs = fs.returns().size();
  for (const auto& r : fs.returns()) {
    TORCH_CHECK(r.type()->kind() == c10::TypeKind::TensorType, "register_autograd_op: ", forward_name,
                " returns ", r.type()->str(), "; only ops returning Tensors are supported");
  }
  TORCH_CHECK(!fs.is_mutable(), "register_autograd_op: ", forward_name, " mutates an argument; only "
              "functional ops are supported");
  spec->edge_of_input.assign(spec->num_inputs, -1);
  for (size_t i = 0; i < spec->num_inputs; ++i) {
    if (is_tensor(fs.arguments()[i].type())) {
      spec->edge_of_input[i] = static_cast<int>(spec->num_edges++);
      spec->tensor_inputs.push_back(static_cast<int>(i));
    }
  }
  TORCH_CHECK(args.size() == bs.arguments().size(), "register_autograd_op: ", backward_name, " takes ",
              bs.arguments().size(), " arguments, the spec gives ", args.size());
  TORCH_CHECK(gives.size() == bs.returns().size(), "register_autograd_op: ", backward_name, " returns ",
              bs.returns().size(), " values, gives names ", gives.size());
  for (int input : gives) {
    TORCH_CHECK(input < 0 || (input < static_cast<int>(spec->num_inputs) && spec->edge_of_input[input] >= 0),
                "register_autograd_op: gives names input ", input, " of ", forward_name,
                ", which is not a Tensor argument");
  }
  for (size_t k = 0; k < args.size(); ++k) {
    Arg& a = args[k];
    const int bound = static_cast<int>(a.ref == Ref::Grad || a.ref == Ref::Output ? spec->num_outputs
                                                                                  : spec->num_inputs);
    TORCH_CHECK(a.index >= 0 && a.index < bound, "register_autograd_op: argument ", k, " of ", backward_name,
                " refers to index ", a.index, ", out of range for ", forward_name);
    a.symbolic = takes_symint(bs.arguments()[k].real_type());
    TORCH_CHECK(a.ref != Ref::Sizes && a.ref != Ref::Size || spec->edge_of_input[a.index] >= 0,
                "register_autograd_op: argument ", k, " of ", backward_name, " takes the sizes of input ",
                a.index, " of ", forward_name, ", which is not a Tensor");
  }
  spec->args = std::move(args);
  spec->gives = std::move(gives);
  return spec;
}

}  // namespace

extern "C" {

// Register the autograd kernel described by `spec_text`; returns a handle that
// jit_loader_autograd_unregister withdraws, or null with the message in `error`.
__attribute__((visibility("default"))) void* jit_loader_autograd_register(const char* spec_text, char* error,
                                                                          size_t size) {
  try {
    std::optional<c10::OperatorHandle> forward;
    auto spec = parse_spec(spec_text, forward);
    const auto& name = forward->operator_name();
    const auto sep = name.name.find("::");
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, name.name.substr(0, sep),
                                                c10::DispatchKey::Autograd, __FILE__, __LINE__);
    std::string op = name.name.substr(sep + 2);
    if (!name.overload_name.empty()) op += "." + name.overload_name;
    lib->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(spec)));
    return lib.release();
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), size - 1);
    error[size - 1] = '\0';
    return nullptr;
  }
}

__attribute__((visibility("default"))) void jit_loader_autograd_unregister(void* handle) {
  delete static_cast<torch::Library*>(handle);
}

}  // extern "C"
