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

inline bool is_integral(ScalarType t) {
  return t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short ||
         t == ScalarType::Int || t == ScalarType::Long || t == ScalarType::UInt16 ||
         t == ScalarType::UInt32 || t == ScalarType::UInt64;
}

// "[3, 4]": how torch prints a list of numbers (a shape, an int[] or float[] argument).
template <typename List>
inline std::string list_of(const List& values) {
  std::ostringstream out;
  out << "[";
  bool first = true;
  for (const auto& v : values) {
    out << (first ? "" : ", ") << v;
    first = false;
  }
  out << "]";
  return out.str();
}

inline std::string shape_of(const torch::stable::Tensor& t) { return list_of(t.sizes()); }

}  // namespace ops_common

#define OP_CHECK_FLOATING(op, name, t)                                                 \
  STD_TORCH_CHECK(::ops_common::is_floating((t).scalar_type()), op, ": ", name,         \
                  " must be a floating-point tensor, got ", (t).scalar_type())

#define OP_CHECK_DIM(op, name, t, d)                                                   \
  STD_TORCH_CHECK((t).dim() == (d), op, ": ", name, " must be a ", d, "-D tensor, got ",  \
                  (t).dim(), "-D with shape ", ::ops_common::shape_of(t))

#define OP_CHECK_SIZE(op, name, t, dim, expected)                                      \
  STD_TORCH_CHECK((t).size(dim) == (expected), op, ": ", name, ".size(", dim, ") must be ", \
                  expected, ", got ", (t).size(dim), " (shape ", ::ops_common::shape_of(t), ")")

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
