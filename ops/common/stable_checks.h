#pragma once
// Argument checks of the stable-ABI ops, the twins of common/checks.h: each names the
// op and the argument and shows the bad value, in the same words as the ATen checks.
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <sstream>
#include <string>

namespace ops_common {

using torch::headeronly::ScalarType;

inline bool is_floating(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half ||
         t == ScalarType::BFloat16;
}

// "cpu", "cuda:0": how torch prints a device.
inline std::string device_name(const torch::stable::Tensor& t) {
  if (t.is_cpu()) return "cpu";
  std::ostringstream out;
  out << (t.is_cuda() ? "cuda" : "device") << ":" << static_cast<int>(t.get_device_index());
  return out.str();
}

// "[3, 4]": how torch prints a shape.
inline std::string shape_of(const torch::stable::Tensor& t) {
  std::ostringstream out;
  out << "[";
  for (int64_t d = 0; d < t.dim(); ++d) out << (d ? ", " : "") << t.size(d);
  out << "]";
  return out.str();
}

}  // namespace ops_common

#define OP_CHECK_FLOATING(op, name, t)                                                 \
  STD_TORCH_CHECK(::ops_common::is_floating((t).scalar_type()), op, ": ", name,         \
                  " must be a floating-point tensor, got ", (t).scalar_type())

#define OP_CHECK_SAME_DEVICE(op, name, t, ref_name, ref)                               \
  STD_TORCH_CHECK(::ops_common::device_name(t) == ::ops_common::device_name(ref), op, ": ", \
                  name, " is on ", ::ops_common::device_name(t), " but ", ref_name, " is on ", \
                  ::ops_common::device_name(ref))

#define OP_CHECK_SAME_DTYPE(op, name, t, ref_name, ref)                                \
  STD_TORCH_CHECK((t).scalar_type() == (ref).scalar_type(), op, ": ", name, " has dtype ", \
                  (t).scalar_type(), " but ", ref_name, " has dtype ", (ref).scalar_type())

#define OP_CHECK_SAME_SHAPE(op, name, t, ref_name, ref)                                \
  STD_TORCH_CHECK(::ops_common::shape_of(t) == ::ops_common::shape_of(ref), op, ": ", name, \
                  " has shape ", ::ops_common::shape_of(t), " but ", ref_name, " has shape ", \
                  ::ops_common::shape_of(ref))
