#pragma once
// sigmoid's tag types, for the host side (checks and dtype dispatch name the op with
// kName) and for the kernels alike. The math of each, apply, is declared here and
// defined in sigmoid.h, which only the CPU loops (sigmoid_cpu.cpp) and the CUDA kernels
// (sigmoid_cuda.cu) include: an edit of the math recompiles no host glue, and on a GPU it
// reaches the next CUDA call without a build (ARCHITECTURE.md, "Header edits").
#include "common/host_device.h"

namespace sigmoid_op {

struct Forward {
  static constexpr const char* kName = "sigmoid.forward";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T x);
};

// The backward takes the saved output y.
struct Backward {
  static constexpr const char* kName = "sigmoid.backward";
  static constexpr const char* kSavedName = "y";
  template <bool kFast, typename T>
  OPS_HOST_DEVICE static T apply(T grad, T y);
};

}  // namespace sigmoid_op
