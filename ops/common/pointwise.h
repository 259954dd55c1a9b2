#pragma once
// Host side of the elementwise ops on every backend, on the LibTorch stable ABI, so that
// such an op is its math (a torch-free header, e.g. ops/sigmoid/sigmoid.h) plus its
// schema. An Op is a struct with
//   static constexpr const char* kName;            // "sigmoid.forward", for errors
//   static constexpr const char* kSavedName;       // backward only: "y" or "x"
//   template <bool kFast, typename T> OPS_HOST_DEVICE static T apply(T...);
// Inputs of any layout are made contiguous and outputs are contiguous with the input's
// shape, so the kernels only ever see flat buffers. CUDA twins: common/pointwise_cuda.h.
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Dispatch_v2.h>

#include <cstdint>

#include "common/stable_checks.h"
#include "common/stable_ops.h"  // OPS_DISPATCH_FLOATING

namespace ops_common {

using torch::stable::Tensor;

// out[i] = Op::apply(in[i]...) over n contiguous elements on all threads: the CPU loops,
// compiled in the op's own CPU kernel unit (<op>_cpu.cpp, OPS_INSTANTIATE_CPU_UNARY or
// _BINARY of common/cpu_loops.h), so that an edit of the host unit compiles no loop.
template <typename Op, typename T>
void map_cpu(int64_t n, T* out, const T* in);
template <typename Op, typename T>
void map_cpu(int64_t n, T* out, const T* a, const T* b);

inline void check_pointwise_input(const char* op, const char* name, const Tensor& t) {
  OP_CHECK_FLOATING(op, name, t);
}

inline void check_pointwise_grad(const char* op, const Tensor& grad, const char* saved_name,
                                 const Tensor& saved) {
  OP_CHECK_FLOATING(op, saved_name, saved);
  OP_CHECK_SAME_DEVICE(op, "grad", grad, saved_name, saved);
  OP_CHECK_SAME_DTYPE(op, "grad", grad, saved_name, saved);
  OP_CHECK_SAME_SHAPE(op, "grad", grad, saved_name, saved);
}

// y = Op(x) on CPU.
template <typename Op>
Tensor pointwise_forward_cpu(const Tensor& x) {
  check_pointwise_input(Op::kName, "x", x);
  const Tensor xc = ops_common::contiguous(x);
  Tensor y = ops_common::empty_contiguous_like(xc);
  OPS_DISPATCH_FLOATING(xc.scalar_type(), Op::kName, [&] {
    map_cpu<Op>(xc.numel(), y.mutable_data_ptr<scalar_t>(), xc.const_data_ptr<scalar_t>());
  });
  return y;
}

// dx = Op(grad, saved) on CPU, saved being what the forward kept (Op::kSavedName).
template <typename Op>
Tensor pointwise_backward_cpu(const Tensor& grad, const Tensor& saved) {
  check_pointwise_grad(Op::kName, grad, Op::kSavedName, saved);
  const Tensor gc = ops_common::contiguous(grad);
  const Tensor sc = ops_common::contiguous(saved);
  Tensor dx = ops_common::empty_contiguous_like(sc);
  OPS_DISPATCH_FLOATING(sc.scalar_type(), Op::kName, [&] {
    map_cpu<Op>(sc.numel(), dx.mutable_data_ptr<scalar_t>(), gc.const_data_ptr<scalar_t>(),
                sc.const_data_ptr<scalar_t>());
  });
  return dx;
}

}  // namespace ops_common
