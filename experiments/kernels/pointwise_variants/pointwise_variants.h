#pragma once
// Torch-free launcher of the launcher variants (pointwise_variants_cuda.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

enum class VariantMath { kIdentity, kGeluAccurate, kGeluFast };

// out = math(in) over n contiguous elements; unroll 1, 2 or 4; waves: grid cap (0: none).
template <typename T>
cudaError_t pointwise_variant(cudaStream_t stream, VariantMath math, int unroll, int waves,
                              int64_t n, T* out, const T* in);
