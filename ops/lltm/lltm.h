#pragma once
// The LLTM cell's elementwise math, compiled by the CPU loops (lltm_cpu.cpp) and the CUDA
// kernels (lltm_cuda.cu) alike, so the two cannot drift. Torch-free. The activations
// themselves are the shared ones of common/scalar_math.h.
//
// Gate layout along the 3 * state feature axis: [input gate | output gate | candidate].
// The forward pass keeps the activated gates; every derivative below is written in
// terms of activations (sigmoid' = s (1 - s), elu' = c + 1 for c <= 0, tanh' = 1 - t^2),
// so backward needs no pre-activations and recomputes only tanh(new_cell).
#include <type_traits>

#include "common/host_device.h"
#include "common/scalar_math.h"

namespace lltm {

template <typename T>
OPS_HOST_DEVICE T d_sigmoid(T s) {
  return s * (T(1) - s);
}

template <typename T>
OPS_HOST_DEVICE T d_elu(T c) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    return ops_common::select(ops_common::negative_mask(c), c + 1.0f, 1.0f);
  }
#endif
  return c > T(0) ? T(1) : c + T(1);
}

template <typename T>
OPS_HOST_DEVICE T d_tanh(T t) {
  return T(1) - t * t;
}

template <typename T>
struct CellForward {
  T input_gate, output_gate, candidate, new_cell, new_h;
};

template <typename T>
OPS_HOST_DEVICE CellForward<T> cell_forward(T z_input, T z_output, T z_candidate, T old_cell) {
  CellForward<T> out;
  out.input_gate = ops_common::sigmoid(z_input);
  out.output_gate = ops_common::sigmoid(z_output);
  out.candidate = ops_common::elu(z_candidate);
  out.new_cell = old_cell + out.candidate * out.input_gate;
  out.new_h = ops_common::tanh(out.new_cell) * out.output_gate;
  return out;
}

template <typename T>
struct CellBackward {
  T d_input, d_output, d_candidate, d_old_cell;  // d_* of the pre-activations, d_old_cell
};

template <typename T>
OPS_HOST_DEVICE CellBackward<T> cell_backward(T input_gate, T output_gate, T candidate,
                                              T new_cell, T grad_h, T grad_cell) {
  const T t = ops_common::tanh(new_cell);
  const T d_new_cell = d_tanh(t) * output_gate * grad_h + grad_cell;
  CellBackward<T> out;
  out.d_input = candidate * d_new_cell * d_sigmoid(input_gate);
  out.d_output = t * grad_h * d_sigmoid(output_gate);
  out.d_candidate = input_gate * d_new_cell * d_elu(candidate);
  out.d_old_cell = d_new_cell;
  return out;
}

}  // namespace lltm
