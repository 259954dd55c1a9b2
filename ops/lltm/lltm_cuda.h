#pragma once
// Torch-free launchers of the LLTM CUDA kernels (lltm_cuda.cu), for the host side
// (lltm_cuda.cpp). T is float, double, ops_common::half_t or bfloat16_t; matrices are strided
// views, so inputs of any layout are read in place. Each launcher runs on stream and
// returns cudaGetLastError().
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/cuda_types.h"
#include "common/host_device.h"

namespace lltm {

// Restrict-qualified, as ATen's RestrictPtrTraits accessors are.
template <typename T>
struct Matrix {
  T* __restrict__ data;
  int64_t row_stride, col_stride;
  OPS_HOST_DEVICE T& operator()(int64_t row, int64_t col) const {
    return data[row * row_stride + col * col_stride];
  }
};

template <typename T>
struct Vector {
  T* __restrict__ data;
  int64_t stride;
  OPS_HOST_DEVICE T& operator()(int64_t i) const { return data[i * stride]; }
};

// Forwards up to this many multiply-adds (batch * 3 state * (state + features)) run as
// one launch (forward_small), and so do backwards of at most kSmallBackwardBatch rows
// (backward_small; the gradients of a feature's rows sit in shared memory). Below it the
// cuBLAS route's host time (a cat, a GEMM call and the pointwise kernel forward; a GEMM
// call backward, which alone costs more host time than a small cell's whole backward)
// exceeds what the one-launch kernels spend on the GPU, which re-read hx once per feature
// (about 1.3 bytes per multiply-add from L2 each way); above it cuBLAS's GEMMs win.
// LLTM_SMALL_MACS overrides the crossover (read once per process), so one build can time
// both routes (experiments/ddp_run.sh, stage bench).
constexpr int64_t kSmallForwardMacs = int64_t(1) << 25;
constexpr int64_t kSmallBackwardBatch = 256;

// gates (batch x 3 state) holds hx @ W^T without bias on entry, the activated gates on exit.
template <typename T>
cudaError_t forward_pointwise(cudaStream_t stream, int64_t batch, int64_t state, Matrix<T> gates,
                              Vector<const T> bias, Matrix<const T> old_cell, Matrix<T> new_h,
                              Matrix<T> new_cell);

// The whole forward in one launch: writes hx = [old_h, input], gates, new_h, new_cell.
template <typename T>
cudaError_t forward_small(cudaStream_t stream, int64_t batch, int64_t features, int64_t state,
                          Matrix<const T> input, Matrix<const T> weights, Vector<const T> bias,
                          Matrix<const T> old_h, Matrix<const T> old_cell, Matrix<T> hx,
                          Matrix<T> gates, Matrix<T> new_h, Matrix<T> new_cell);

// Rows of the per-block-row bias-gradient partial sums that backward_pointwise needs in
// its workspace (backward_workspace_rows(...) x 3 state values of acc_t<T>); 0: none.
int64_t backward_workspace_rows(int64_t batch, int64_t state);

template <typename T>
cudaError_t backward_pointwise(cudaStream_t stream, int64_t batch, int64_t state,
                               Matrix<const T> grad_h, Matrix<const T> grad_cell,
                               Matrix<const T> new_cell, Matrix<const T> gates,
                               Matrix<T> d_gates, Matrix<T> d_old_cell, T* d_bias,
                               ops_common::acc_t<T>* workspace);

// The backward of a small cell in one launch: d_weights (3 state x (state + features)),
// d_bias, and where their data is not null d_gates (for backward_small_dhx) and
// d_old_cell; a null d_weights or d_bias is skipped. batch <= kSmallBackwardBatch.
template <typename T>
cudaError_t backward_small(cudaStream_t stream, int64_t batch, int64_t features, int64_t state,
                           Matrix<const T> grad_h, Matrix<const T> grad_cell,
                           Matrix<const T> new_cell, Matrix<const T> gates, Matrix<const T> hx,
                           Matrix<T> d_gates, Matrix<T> d_old_cell, T* d_bias,
                           Matrix<T> d_weights);

// d_old_h = d_gates @ weights[:, :state] and d_input = d_gates @ weights[:, state:] of a
// small cell, after backward_small wrote d_gates; a null d_input or d_old_h is skipped.
template <typename T>
cudaError_t backward_small_dhx(cudaStream_t stream, int64_t batch, int64_t features,
                               int64_t state, Matrix<const T> d_gates, Matrix<const T> weights,
                               Matrix<T> d_input, Matrix<T> d_old_h);

}  // namespace lltm
