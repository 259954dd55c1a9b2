#pragma once
// gelu's tag types, for the host side (checks and dtype dispatch name the op with kName)
// and for the kernels alike. The math of each, apply, is declared here and defined in
// gelu.h, which only the CPU loops (gelu_cpu.cpp) and the CUDA kernels (gelu_cuda.cu)
// include: an edit of the math recompiles no host glue, and on a GPU it reaches the next
// CUDA call without a build (ARCHITECTURE.md, "Header edits").
#include "common/host_device.h"

namespace gelu_op {

struct Forward {
  static constexpr const char* kName = "gelu.forward";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T x);
};

// The backward takes the saved input x.
struct Backward {
  static constexpr const char* kName = "gelu.backward";
  static constexpr const char* kSavedName = "x";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T grad, T x);
};

}  // namespace gelu_op
