#pragma once
// Host side of the elementwise ops on every backend, so that such an op is its math (a
// torch-free header, e.g. ops/sigmoid/sigmoid.h) plus its schema. An Op is a struct with
//   static constexpr const char* kName;            // "sigmoid.forward", for errors
//   static constexpr const char* kSavedName;       // backward only: "y" or "x"
//   template <bool kFast, typename T> OPS_HOST_DEVICE static T apply(T...);
// Inputs of any layout are made contiguous and outputs are contiguous with the input's
// shape, so the kernels only ever see flat buffers. CUDA twins: common/pointwise_cuda.h.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include "common/checks.h"
#include "common/cpu_loops.h"

namespace ops_common {

inline void check_pointwise_input(const char* op, const char* name, const at::Tensor& t) {
  OP_CHECK_FLOATING(op, name, t);
}

inline void check_pointwise_grad(const char* op, const at::Tensor& grad, const char* saved_name,
                                 const at::Tensor& saved) {
  OP_CHECK_FLOATING(op, saved_name, saved);
  OP_CHECK_SAME_DEVICE(op, "grad", grad, saved_name, saved);
  OP_CHECK_SAME_DTYPE(op, "grad", grad, saved_name, saved);
  TORCH_CHECK(grad.sizes() == saved.sizes(), op, ": grad has shape ", grad.sizes(), " but ",
              saved_name, " has shape ", saved.sizes());
}

inline at::Tensor empty_contiguous_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

// y = Op(x) on CPU.
template <typename Op>
at::Tensor pointwise_forward_cpu(const at::Tensor& x) {
  check_pointwise_input(Op::kName, "x", x);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = empty_contiguous_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), Op::kName, [&] {
    parallel_map<Op>(xc.numel(), y.mutable_data_ptr<scalar_t>(), xc.const_data_ptr<scalar_t>());
  });
  return y;
}

// dx = Op(grad, saved) on CPU, saved being what the forward kept (Op::kSavedName).
template <typename Op>
at::Tensor pointwise_backward_cpu(const at::Tensor& grad, const at::Tensor& saved) {
  check_pointwise_grad(Op::kName, grad, Op::kSavedName, saved);
  const at::Tensor gc = grad.contiguous();
  const at::Tensor sc = saved.contiguous();
  at::Tensor dx = empty_contiguous_like(sc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, sc.scalar_type(), Op::kName, [&] {
    parallel_map<Op>(sc.numel(), dx.mutable_data_ptr<scalar_t>(), gc.const_data_ptr<scalar_t>(),
                     sc.const_data_ptr<scalar_t>());
  });
  return dx;
}

}  // namespace ops_common
