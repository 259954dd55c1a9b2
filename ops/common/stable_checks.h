#pragma once
// Argument checks of the stable-ABI ops, the twins of common/checks.h: each names the
// op and the argument and shows the bad value, in the same words as the ATen checks
// (common/arg_checks.h, on this header's OPS_CHECK and helpers).
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

// "cpu", "cuda:0", "meta": how torch prints a device.
inline std::string device_name(const torch::stable::Tensor& t) {
  const torch::stable::Device device = t.device();
  switch (device.type()) {
    case torch::headeronly::DeviceType::CPU: return "cpu";
    case torch::headeronly::DeviceType::Meta: return "meta";
    case torch::headeronly::DeviceType::CUDA: return "cuda:" + std::to_string(device.index());
    default:
      return "device type " + std::to_string(static_cast<int>(device.type())) + ":" +
             std::to_string(device.index());
  }
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

#include "common/arg_checks.h"
