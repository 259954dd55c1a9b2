// Schema of the launcher variants (experiments/pointwise_variants.py); CUDA only, the
// kernel is registered by pointwise_variants_cuda.cpp.
#include <torch/library.h>

TORCH_LIBRARY(pointwise_variants, m) {
  m.def("forward(Tensor x, str math, int unroll, int max_waves) -> Tensor");
}
