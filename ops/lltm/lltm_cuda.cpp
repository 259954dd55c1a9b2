// LLTM: CUDA host side. Argument checks, device guard, stream, dtype dispatch and
// allocation around the torch-free launchers of lltm_cuda.cu; the GEMMs of large
// forwards and of every backward are at::mm (cuBLAS) in the shared host composition
// (lltm.cpp). Small forwards are the single launch of forward_small.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "common/cuda_host.h"
#include "lltm_compose.h"
#include "lltm_cuda.h"

namespace lltm {
namespace {

using ops_common::cuda_t;

template <typename scalar_t>
Matrix<cuda_t<scalar_t>> matrix(const at::Tensor& t) {
  return {reinterpret_cast<cuda_t<scalar_t>*>(t.data_ptr<scalar_t>()), t.stride(0), t.stride(1)};
}

template <typename scalar_t>
Matrix<const cuda_t<scalar_t>> const_matrix(const at::Tensor& t) {
  return {ops_common::cuda_ptr<scalar_t>(t), t.stride(0), t.stride(1)};
}

template <typename scalar_t>
Vector<const cuda_t<scalar_t>> const_vector(const at::Tensor& t) {
  return {ops_common::cuda_ptr<scalar_t>(t), t.stride(0)};
}

void forward_cuda_pointwise(const at::Tensor& gates, const at::Tensor& bias,
                            const at::Tensor& old_cell, const at::Tensor& new_h,
                            const at::Tensor& new_cell) {
  const c10::cuda::CUDAGuard device_guard(gates.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(),
                                  "lltm_forward_cuda", [&] {
    OPS_CHECK_LAUNCH(forward_pointwise(
        ops_common::current_stream(), new_h.size(0), new_h.size(1), matrix<scalar_t>(gates),
        const_vector<scalar_t>(bias), const_matrix<scalar_t>(old_cell), matrix<scalar_t>(new_h),
        matrix<scalar_t>(new_cell)));
  });
}

at::Tensor backward_cuda_pointwise(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                   const at::Tensor& new_cell, const at::Tensor& gates,
                                   const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  const c10::cuda::CUDAGuard device_guard(new_cell.device());
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  auto d_bias = at::empty({3 * state}, new_cell.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(),
                                  "lltm_backward_cuda", [&] {
    using acc = ops_common::acc_t<cuda_t<scalar_t>>;
    static_assert(std::is_same_v<acc, at::opmath_type<scalar_t>>, "one accumulator type");
    at::Tensor workspace;
    if (const int64_t rows = backward_workspace_rows(batch, state); rows > 0) {
      workspace = at::empty({rows, 3 * state},
                            new_cell.options().dtype(c10::CppTypeToScalarType<acc>::value));
    }
    OPS_CHECK_LAUNCH(backward_pointwise(
        ops_common::current_stream(), batch, state, const_matrix<scalar_t>(grad_h),
        const_matrix<scalar_t>(grad_cell), const_matrix<scalar_t>(new_cell),
        const_matrix<scalar_t>(gates), matrix<scalar_t>(d_gates), matrix<scalar_t>(d_old_cell),
        ops_common::cuda_ptr<scalar_t>(d_bias),
        workspace.defined() ? workspace.mutable_data_ptr<acc>() : nullptr));
  });
  return d_bias;
}

ForwardResult forward_small_cuda(const ForwardShape& shape, const at::Tensor& input,
                                 const at::Tensor& weights, const at::Tensor& bias,
                                 const at::Tensor& old_h, const at::Tensor& old_cell) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const auto [batch, features, state] = shape;
  const auto options = input.options().memory_format(at::MemoryFormat::Contiguous);
  auto hx = at::empty({batch, state + features}, options);
  auto gates = at::empty({batch, 3 * state}, options);
  auto new_h = at::empty({batch, state}, options);
  auto new_cell = at::empty({batch, state}, options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(),
                                  "lltm_forward_small_cuda", [&] {
    OPS_CHECK_LAUNCH(forward_small(
        ops_common::current_stream(), batch, features, state, const_matrix<scalar_t>(input),
        const_matrix<scalar_t>(weights), const_vector<scalar_t>(bias),
        const_matrix<scalar_t>(old_h), const_matrix<scalar_t>(old_cell), matrix<scalar_t>(hx),
        matrix<scalar_t>(gates), matrix<scalar_t>(new_h), matrix<scalar_t>(new_cell)));
  });
  return {new_h, new_cell, gates, hx};
}

ForwardResult forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& old_h,
                           const at::Tensor& old_cell) {
  const ForwardShape shape = check_forward(input, weights, bias, old_h, old_cell);
  const int64_t macs = shape.batch * 3 * shape.state * (shape.state + shape.features);
  if (shape.batch * shape.state > 0 && macs <= kSmallForwardMacs) {
    return forward_small_cuda(shape, input, weights, bias, old_h, old_cell);
  }
  return compose_forward(&forward_cuda_pointwise, shape, input, weights, bias, old_h, old_cell);
}

BackwardResult backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                             const at::Tensor& new_cell, const at::Tensor& gates,
                             const at::Tensor& hx, const at::Tensor& weights,
                             std::array<bool, 5> output_mask) {
  return backward(&backward_cuda_pointwise, grad_h, grad_cell, new_cell, gates, hx, weights,
                  output_mask);
}

}  // namespace
}  // namespace lltm

TORCH_LIBRARY_IMPL(lltm, CUDA, m) {
  m.impl("forward", &lltm::forward_cuda);
  m.impl("backward", &lltm::backward_cuda);
}
