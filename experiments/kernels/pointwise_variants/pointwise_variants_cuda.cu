// Tuning variants of the elementwise launcher (common/vectorized.cuh), for
// experiments/pointwise_variants.py: the gelu forward with each unroll depth, grid cap and
// exp flavour, and the identity through the same launcher (its own copy ceiling).
// Torch-free; the host side is pointwise_variants_cuda.cpp.
#include "common/vectorized.cuh"
#include "gelu/gelu.h"
#include "pointwise_variants.h"

namespace {

using ops_common::acc_t;

struct Identity {
  template <typename T>
  __device__ T operator()(T x) const {
    return x;
  }
};

template <bool kFast, typename T>
struct GeluForwardWith {
  __device__ T operator()(T x) const {
    return ops_common::from_acc<T>(gelu_op::Forward::apply<kFast>(ops_common::to_acc(x)));
  }
};

template <typename F, typename T>
cudaError_t run(cudaStream_t stream, F f, int unroll, int waves, int64_t n, T* out, const T* in) {
  switch (unroll) {
    case 1: return ops_common::launch_elementwise_config<1>(stream, waves, f, n, out, in);
    case 2: return ops_common::launch_elementwise_config<2>(stream, waves, f, n, out, in);
    default: return ops_common::launch_elementwise_config<4>(stream, waves, f, n, out, in);
  }
}

}  // namespace

template <typename T>
cudaError_t pointwise_variant(cudaStream_t stream, VariantMath math, int unroll, int waves,
                              int64_t n, T* out, const T* in) {
  switch (math) {
    case VariantMath::kIdentity: return run(stream, Identity{}, unroll, waves, n, out, in);
    case VariantMath::kGeluAccurate:
      return run(stream, GeluForwardWith<false, T>{}, unroll, waves, n, out, in);
    default: return run(stream, GeluForwardWith<true, T>{}, unroll, waves, n, out, in);
  }
}

template cudaError_t pointwise_variant<float>(cudaStream_t, VariantMath, int, int, int64_t, float*,
                                              const float*);
template cudaError_t pointwise_variant<double>(cudaStream_t, VariantMath, int, int, int64_t,
                                               double*, const double*);
template cudaError_t pointwise_variant<ops_common::half_t>(cudaStream_t, VariantMath, int, int,
                                                           int64_t, ops_common::half_t*,
                                                           const ops_common::half_t*);
template cudaError_t pointwise_variant<ops_common::bfloat16_t>(cudaStream_t, VariantMath, int, int,
                                                               int64_t, ops_common::bfloat16_t*,
                                                               const ops_common::bfloat16_t*);
