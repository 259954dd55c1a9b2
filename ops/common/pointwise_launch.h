#pragma once
// Torch-free declarations of the pointwise CUDA launchers, for an op's host side
// (*_cuda.cpp): defined in common/vectorized.cuh and compiled into the op's .cu by
// OPS_INSTANTIATE_UNARY(Op) or OPS_INSTANTIATE_BINARY(Op) for float, double, half_t and
// bfloat16_t. Each runs out[i] = Op::apply(in[i]...) over n contiguous elements on
// stream and returns cudaGetLastError().
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ops_common {

template <typename Op, typename T>
cudaError_t launch_pointwise(cudaStream_t stream, int64_t n, T* out, const T* in);

template <typename Op, typename T>
cudaError_t launch_pointwise(cudaStream_t stream, int64_t n, T* out, const T* a, const T* b);

}  // namespace ops_common
