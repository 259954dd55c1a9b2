#pragma once
// The host composition of the LLTM op that both backends share (lltm.cpp implements it,
// lltm_cuda.cpp reuses it): argument checks, the GEMMs (at::mm: cuBLAS on the GPU) and
// buffers, around a pointwise stage that each backend supplies.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <tuple>

namespace lltm {

// Pointwise stages. forward: gates holds hx @ W^T on entry (bias not yet added) and the
// activated gates on exit; backward: writes d_gates and d_old_cell and returns d_bias
// (3 * state).
using ForwardPointwise = void (*)(const at::Tensor& gates, const at::Tensor& bias,
                                  const at::Tensor& old_cell, const at::Tensor& new_h,
                                  const at::Tensor& new_cell);
using BackwardPointwise = at::Tensor (*)(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                         const at::Tensor& new_cell, const at::Tensor& gates,
                                         const at::Tensor& d_gates, const at::Tensor& d_old_cell);

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

struct ForwardShape {
  int64_t batch, features, state;
};
using BackwardShape = ForwardShape;

// Checks forward's arguments (each error names the argument and shows its value).
ForwardShape check_forward(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& old_h,
                           const at::Tensor& old_cell);

// On checked arguments: hx = cat(old_h, input), gates = hx @ W^T, then the pointwise
// stage. Returns new_h, new_cell, gates (activated), hx = [old_h, input].
ForwardResult compose_forward(
    ForwardPointwise pointwise, const ForwardShape& shape, const at::Tensor& input,
    const at::Tensor& weights, const at::Tensor& bias, const at::Tensor& old_h,
    const at::Tensor& old_cell);

// Checks backward's arguments, as check_forward does forward's.
BackwardShape check_backward(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                             const at::Tensor& new_cell, const at::Tensor& gates,
                             const at::Tensor& hx, const at::Tensor& weights);

// On checked arguments: the pointwise stage, then one GEMM per input gradient needed.
// Returns d_input, d_weights, d_bias, d_old_h, d_old_cell; those off in output_mask are
// undefined and their GEMMs are skipped.
BackwardResult compose_backward(
    BackwardPointwise pointwise, const BackwardShape& shape, const at::Tensor& grad_h,
    const at::Tensor& grad_cell, const at::Tensor& new_cell, const at::Tensor& gates,
    const at::Tensor& hx, const at::Tensor& weights, std::array<bool, 5> output_mask);

}  // namespace lltm
