#pragma once
// Argument checks of the ATen ops: each names the op and the argument and shows the bad
// value (common/arg_checks.h, the same texts as the stable-ABI ops').
#include <ATen/ATen.h>

namespace ops_common {

// float, double, half, bfloat16: what the ops' dtype dispatch takes.
inline bool is_floating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

inline at::IntArrayRef shape_of(const at::Tensor& t) { return t.sizes(); }  // prints [3, 4]
inline at::Device device_name(const at::Tensor& t) { return t.device(); }  // prints cpu, cuda:0

}  // namespace ops_common

// OPS_CHECK(condition, message parts...): TORCH_CHECK, under the name the stable ops use.
#define OPS_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)

#include "common/arg_checks.h"
