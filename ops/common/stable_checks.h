#pragma once
// Argument checks of the stable-ABI ops, the twins of common/checks.h: each names the
// op and the argument and shows the bad value, in the same words as the ATen checks.
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ops_common {

namespace detail {
// A failed check's error, as ATen's TORCH_CHECK shows it from Python: the message alone, on
// one line (STD_TORCH_CHECK puts the function and the absolute path of the header before
// it). TORCH_SHOW_CPP_STACKTRACES=1, which asks ATen for the C++ context, adds the function
// and source location on a line after it.
template <typename... Args>
[[noreturn]] void check_failed(const char* func, const char* file, int line, const Args&... args) {
  std::ostringstream out;
  ((out << args), ...);
  const char* context = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  if (context != nullptr && context[0] == '1') {
    out << "\nException raised from " << func << " at " << file << ":" << line;
  }
  throw std::runtime_error(out.str());
}
}  // namespace detail

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

// OPS_CHECK(condition, message parts...): the stable ABI's TORCH_CHECK, with ATen's text (see
// detail::check_failed); common/checks.h gives ATen ops the same name.
#define OPS_CHECK(cond, ...)                                                           \
  do {                                                                                 \
    if (C10_UNLIKELY_OR_CONST(!(cond))) {                                              \
      ::ops_common::detail::check_failed(__func__, __FILE__, __LINE__, __VA_ARGS__);   \
    }                                                                                  \
  } while (false)

#define OP_CHECK_FLOATING(op, name, t)                                                   \
  OPS_CHECK(::ops_common::is_floating((t).scalar_type()), op, ": ", name,                 \
            " must be a floating-point tensor, got ", (t).scalar_type())

#define OP_CHECK_DIM(op, name, t, d)                                                     \
  OPS_CHECK((t).dim() == (d), op, ": ", name, " must be a ", d, "-D tensor, got ",        \
            (t).dim(), "-D with shape ", ::ops_common::shape_of(t))

#define OP_CHECK_SIZE(op, name, t, dim, expected)                                        \
  OPS_CHECK((t).size(dim) == (expected), op, ": ", name, ".size(", dim, ") must be ",     \
            expected, ", got ", (t).size(dim), " (shape ", ::ops_common::shape_of(t), ")")

#define OP_CHECK_SAME_DEVICE(op, name, t, ref_name, ref)                                 \
  OPS_CHECK(::ops_common::device_name(t) == ::ops_common::device_name(ref), op, ": ",     \
            name, " is on ", ::ops_common::device_name(t), " but ", ref_name, " is on ",  \
            ::ops_common::device_name(ref))

#define OP_CHECK_SAME_DTYPE(op, name, t, ref_name, ref)                                  \
  OPS_CHECK((t).scalar_type() == (ref).scalar_type(), op, ": ", name, " has dtype ",      \
            (t).scalar_type(), " but ", ref_name, " has dtype ", (ref).scalar_type())

#define OP_CHECK_SAME_SHAPE(op, name, t, ref_name, ref)                                  \
  OPS_CHECK(::ops_common::shape_of(t) == ::ops_common::shape_of(ref), op, ": ", name,     \
            " has shape ", ::ops_common::shape_of(t), " but ", ref_name, " has shape ",   \
            ::ops_common::shape_of(ref))
