// LLTM: CUDA host side. Argument checks, device guard, stream, dtype dispatch and
// allocation around the torch-free launchers of lltm_cuda.cu; the GEMMs of large cells
// are at::mm (cuBLAS) in the shared host composition (lltm.cpp). Small cells skip cuBLAS:
// the forward is the single launch of forward_small, the backward that of backward_small
// (plus backward_small_dhx where the input or old_h gradient is asked for).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/EmptyTensor.h>
#include <torch/library.h>

#include <cstdlib>

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

// A new contiguous tensor of like's dtype and device, from the caching allocator directly:
// at::empty reaches the same call through two dispatcher hops, which for the four buffers
// of a small cell add up to a noticeable share of its host time. The kernels write every
// element, so no deterministic fill is needed either.
at::Tensor new_buffer(at::IntArrayRef sizes, const at::Tensor& like) {
  return at::detail::empty_cuda(sizes, like.scalar_type(), like.device(), std::nullopt);
}

// kSmallForwardMacs, or LLTM_SMALL_MACS where set (see lltm_cuda.h).
int64_t small_macs() {
  static const int64_t value = [] {
    const char* text = std::getenv("LLTM_SMALL_MACS");
    if (text == nullptr || *text == '\0') return kSmallForwardMacs;
    char* end = nullptr;
    const long long parsed = std::strtoll(text, &end, 10);
    TORCH_CHECK(*end == '\0' && parsed >= 0, "lltm: LLTM_SMALL_MACS must be a count of "
                "multiply-adds (an integer >= 0), got '", text, "'");
    return static_cast<int64_t>(parsed);
  }();
  return value;
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
  auto hx = new_buffer({batch, state + features}, input);
  auto gates = new_buffer({batch, 3 * state}, input);
  auto new_h = new_buffer({batch, state}, input);
  auto new_cell = new_buffer({batch, state}, input);
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
  if (shape.batch * shape.state > 0 && macs <= small_macs()) {
    return forward_small_cuda(shape, input, weights, bias, old_h, old_cell);
  }
  return compose_forward(&forward_cuda_pointwise, shape, input, weights, bias, old_h, old_cell);
}

// The whole backward of a small cell in one launch (backward_small), plus one for d_input
// and d_old_h where either is asked (backward_small_dhx). Only the gradients asked for are
// allocated.
BackwardResult backward_small_cuda(const BackwardShape& shape, const at::Tensor& grad_h,
                                   const at::Tensor& grad_cell, const at::Tensor& new_cell,
                                   const at::Tensor& gates, const at::Tensor& hx,
                                   const at::Tensor& weights, std::array<bool, 5> output_mask) {
  const c10::cuda::CUDAGuard device_guard(new_cell.device());
  const auto [batch, features, state] = shape;
  const auto [need_input, need_weights, need_bias, need_old_h, need_old_cell] = output_mask;
  const auto maybe_empty = [&](bool needed, at::IntArrayRef sizes) {
    return needed ? new_buffer(sizes, new_cell) : at::Tensor();
  };
  at::Tensor d_gates = maybe_empty(need_input || need_old_h, {batch, 3 * state});
  at::Tensor d_old_cell = maybe_empty(need_old_cell, {batch, state});
  at::Tensor d_bias = maybe_empty(need_bias, {3 * state});
  at::Tensor d_weights = maybe_empty(need_weights, {3 * state, state + features});
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, new_cell.scalar_type(),
                                  "lltm_backward_small_cuda", [&] {
    using T = cuda_t<scalar_t>;
    const auto out = [](const at::Tensor& t) {
      return t.defined() ? matrix<scalar_t>(t) : Matrix<T>{nullptr, 0, 0};
    };
    OPS_CHECK_LAUNCH(backward_small(
        ops_common::current_stream(), batch, features, state, const_matrix<scalar_t>(grad_h),
        const_matrix<scalar_t>(grad_cell), const_matrix<scalar_t>(new_cell),
        const_matrix<scalar_t>(gates), const_matrix<scalar_t>(hx), out(d_gates),
        out(d_old_cell), d_bias.defined() ? ops_common::cuda_ptr<scalar_t>(d_bias) : nullptr,
        out(d_weights)));
  });
  if (batch * state == 0) {  // no launch ran: the sums over no rows are zero
    d_weights = need_weights ? d_weights.zero_() : d_weights;
    d_bias = need_bias ? d_bias.zero_() : d_bias;
  }
  at::Tensor d_input = maybe_empty(need_input, {batch, features});
  at::Tensor d_old_h = maybe_empty(need_old_h, {batch, state});
  if (state == 0) {  // d_gates has no columns: the sums over them are zero
    d_input = need_input ? d_input.zero_() : d_input;
  } else if (need_input || need_old_h) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, new_cell.scalar_type(),
                                    "lltm_backward_small_dhx_cuda", [&] {
      using T = cuda_t<scalar_t>;
      const auto out = [](const at::Tensor& t) {
        return t.defined() ? matrix<scalar_t>(t) : Matrix<T>{nullptr, 0, 0};
      };
      OPS_CHECK_LAUNCH(backward_small_dhx(
          ops_common::current_stream(), batch, features, state,
          const_matrix<scalar_t>(d_gates), const_matrix<scalar_t>(weights), out(d_input),
          out(d_old_h)));
    });
  }
  return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
}

BackwardResult backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                             const at::Tensor& new_cell, const at::Tensor& gates,
                             const at::Tensor& hx, const at::Tensor& weights,
                             std::array<bool, 5> output_mask) {
  const BackwardShape shape = check_backward(grad_h, grad_cell, new_cell, gates, hx, weights);
  const int64_t macs = shape.batch * 3 * shape.state * (shape.state + shape.features);
  if (shape.batch <= kSmallBackwardBatch && macs <= small_macs()) {
    return backward_small_cuda(shape, grad_h, grad_cell, new_cell, gates, hx, weights,
                               output_mask);
  }
  return compose_backward(&backward_cuda_pointwise, shape, grad_h, grad_cell, new_cell, gates, hx,
                          weights, output_mask);
}

}  // namespace
}  // namespace lltm

TORCH_LIBRARY_IMPL(lltm, CUDA, m) {
  m.impl("forward", &lltm::forward_cuda);
  m.impl("backward", &lltm::backward_cuda);
}
