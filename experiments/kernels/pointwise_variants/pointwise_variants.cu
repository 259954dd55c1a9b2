// Tuning variants of the elementwise launcher (common/vectorized.cuh), for
// experiments/pointwise_variants.py: the gelu forward with each unroll depth, grid cap and
// exp flavour, and the identity through the same launcher (its own copy ceiling).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/activations.h"
#include "common/vectorized.cuh"

namespace {

struct Identity {
  template <typename T>
  __device__ T operator()(T x) const {
    return x;
  }
};

template <bool kFast>
struct GeluForwardWith {
  template <typename T>
  __device__ T operator()(T x) const {
    using acc_t = at::opmath_type<T>;
    return static_cast<T>(ops_common::gelu_forward<kFast>(static_cast<acc_t>(x)));
  }
};

template <typename F>
at::Tensor run(F f, const at::Tensor& x, int64_t unroll, int64_t max_waves) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "variants: x must be a contiguous CUDA tensor");
  TORCH_CHECK(max_waves >= 0, "variants: max_waves must be >= 0 (0: no cap), got ", max_waves);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int waves = static_cast<int>(std::min<int64_t>(max_waves, 1 << 16));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "variants", [&] {
    const auto* in = x.const_data_ptr<scalar_t>();
    auto* out = y.mutable_data_ptr<scalar_t>();
    switch (unroll) {
      case 1: ops_common::launch_elementwise_config<1>(waves, f, x.numel(), out, in); break;
      case 2: ops_common::launch_elementwise_config<2>(waves, f, x.numel(), out, in); break;
      case 4: ops_common::launch_elementwise_config<4>(waves, f, x.numel(), out, in); break;
      default: TORCH_CHECK(false, "variants: unroll must be 1, 2 or 4, got ", unroll);
    }
  });
  return y;
}

// math: "identity", "gelu_accurate" (CUDA's expf) or "gelu_fast" (__expf).
at::Tensor forward(const at::Tensor& x, c10::string_view math, int64_t unroll, int64_t max_waves) {
  if (math == "identity") return run(Identity{}, x, unroll, max_waves);
  if (math == "gelu_accurate") return run(GeluForwardWith<false>{}, x, unroll, max_waves);
  if (math == "gelu_fast") return run(GeluForwardWith<true>{}, x, unroll, max_waves);
  TORCH_CHECK(false, "variants: math must be identity, gelu_accurate or gelu_fast, got ", math);
}

}  // namespace

TORCH_LIBRARY(pointwise_variants, m) {
  m.def("forward(Tensor x, str math, int unroll, int max_waves) -> Tensor");
}

TORCH_LIBRARY_IMPL(pointwise_variants, CUDA, m) {
  m.impl("forward", &forward);
}
