// Host side of the launcher variants: checks, device guard, stream, dtype dispatch.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>

#include "common/cuda_host.h"
#include "pointwise_variants.h"

namespace {

// math: "identity", "gelu_accurate" (CUDA's expf) or "gelu_fast" (__expf).
at::Tensor forward(const at::Tensor& x, c10::string_view math, int64_t unroll, int64_t max_waves) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "variants: x must be a contiguous CUDA tensor");
  TORCH_CHECK(max_waves >= 0, "variants: max_waves must be >= 0 (0: no cap), got ", max_waves);
  TORCH_CHECK(unroll == 1 || unroll == 2 || unroll == 4,
              "variants: unroll must be 1, 2 or 4, got ", unroll);
  VariantMath kind;
  if (math == "identity") {
    kind = VariantMath::kIdentity;
  } else if (math == "gelu_accurate") {
    kind = VariantMath::kGeluAccurate;
  } else if (math == "gelu_fast") {
    kind = VariantMath::kGeluFast;
  } else {
    TORCH_CHECK(false, "variants: math must be identity, gelu_accurate or gelu_fast, got ", math);
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int waves = static_cast<int>(std::min<int64_t>(max_waves, 1 << 16));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "variants", [&] {
    OPS_CHECK_LAUNCH(pointwise_variant(ops_common::current_stream(), kind,
                                       static_cast<int>(unroll), waves, x.numel(),
                                       ops_common::cuda_ptr<scalar_t>(y),
                                       ops_common::cuda_ptr<scalar_t>(x)));
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointwise_variants, CUDA, m) {
  m.impl("forward", &forward);
}
