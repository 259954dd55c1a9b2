#pragma once
// Host-side pieces of the stable-ABI ops that torch 2.11's stable API (the oldest the ops
// load in) does not offer as such: the floating dtype dispatch, the accumulation type,
// the memory format torch suggests for a tensor, and the aten ops the hosts need beyond
// torch/csrc/stable/ops.h, called by name through the dispatcher (torch_call_dispatcher,
// the stable C shim's way to run any aten op).
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Dispatch.h>
#include <torch/headeronly/core/MemoryFormat.h>
#include <torch/headeronly/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

// The dtypes every floating kernel takes (scalar_t inside the body, a lambda given as the
// last arguments, so that its commas need no wrapping).
#define OPS_DISPATCH_FLOATING(TYPE, NAME, ...)                                       \
  THO_DISPATCH_SWITCH(TYPE, NAME,                                                    \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Double, __VA_ARGS__) \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Float, __VA_ARGS__)  \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Half, __VA_ARGS__)   \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::BFloat16, __VA_ARGS__))

namespace ops_common {

using torch::headeronly::MemoryFormat;

// The type a kernel of scalar_t accumulates in (at::opmath_type): float for the 16-bit
// types, the type itself otherwise.
template <typename scalar_t>
using opmath_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

template <typename T> constexpr torch::headeronly::ScalarType scalar_type_of();
template <> constexpr torch::headeronly::ScalarType scalar_type_of<float>() {
  return torch::headeronly::ScalarType::Float;
}
template <> constexpr torch::headeronly::ScalarType scalar_type_of<double>() {
  return torch::headeronly::ScalarType::Double;
}

// Tensor::suggest_memory_format of a 4-D tensor: ChannelsLast when its strides order the
// dimensions C, W, H, N from the fastest (ties and size-1 dimensions decided as ATen's
// is_channels_last_strides_2d decides them), Contiguous otherwise.
inline MemoryFormat suggest_memory_format(const torch::stable::Tensor& t) {
  if (t.dim() != 4 || t.stride(1) == 0) return MemoryFormat::Contiguous;
  int64_t min = 0;
  for (const int64_t d : {1, 3, 2, 0}) {
    const int64_t size = t.size(d), stride = t.stride(d);
    if (size == 0 || stride < min) return MemoryFormat::Contiguous;
    if (d == 0 && min == t.stride(1)) return MemoryFormat::Contiguous;
    min = size > 1 ? stride * size : stride;
  }
  return MemoryFormat::ChannelsLast;
}

// Runs aten::<name>.<overload> on a stack of at least as many slots as the op has
// arguments and returns; the results are in the first slots.
template <size_t N>
void call_aten(const char* name, const char* overload, std::array<StableIValue, N>& stack) {
  STD_TORCH_CHECK(torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION) ==
                      AOTI_TORCH_SUCCESS,
                  "calling ", name, " through the dispatcher failed");
}

// The indices that sort a 1-D tensor by decreasing value, ties in index order
// (aten::sort.stable; the stable API of 2.11 has no sort).
inline torch::stable::Tensor argsort_descending_stable(const torch::stable::Tensor& t) {
  using torch::stable::detail::from;
  std::array<StableIValue, 4> stack{from(t), from(std::optional<bool>(true)), from(int64_t{0}),
                                    from(true)};
  call_aten("aten::sort", "stable", stack);
  torch::stable::detail::to<torch::stable::Tensor>(stack[0]);  // values, released
  return torch::stable::detail::to<torch::stable::Tensor>(stack[1]);
}

// t.index_select(dim, index) (not in the stable API of 2.11).
inline torch::stable::Tensor index_select(const torch::stable::Tensor& t, int64_t dim,
                                          const torch::stable::Tensor& index) {
  using torch::stable::detail::from;
  std::array<StableIValue, 3> stack{from(t), from(dim), from(index)};
  call_aten("aten::index_select", "", stack);
  return torch::stable::detail::to<torch::stable::Tensor>(stack[0]);
}

// t itself where it is contiguous, else a contiguous copy. torch::stable::contiguous
// asks the dispatcher (a boxed aten::contiguous) even for a contiguous tensor; the check
// is one shim call. The ops' host code calls this on every input, so a small tensor's
// call pays the dispatcher's round trip only where a copy is needed.
inline torch::stable::Tensor contiguous(const torch::stable::Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

// Whether a 4-D t is dense in channels-last order (strides of size-1 dimensions are free),
// as ATen's is_contiguous(ChannelsLast) decides it.
inline bool is_channels_last_dense(const torch::stable::Tensor& t) {
  if (t.dim() != 4) return false;
  int64_t expected = 1;
  for (const int64_t d : {1, 3, 2, 0}) {
    const int64_t size = t.size(d);
    if (size == 1) continue;
    if (size == 0) return true;
    if (t.stride(d) != expected) return false;
    expected *= size;
  }
  return true;
}

// t itself where it is dense in format, else a copy that is (torch::stable::contiguous with
// a format, a boxed call through the dispatcher, only for the copy).
inline torch::stable::Tensor contiguous(const torch::stable::Tensor& t, MemoryFormat format) {
  const bool dense = format == MemoryFormat::ChannelsLast ? is_channels_last_dense(t)
                                                          : t.is_contiguous();
  return dense ? t : torch::stable::contiguous(t, format);
}

// An uninitialised tensor of the given sizes, dense in format (Contiguous, or ChannelsLast
// for 4-D sizes), with like's dtype and device, allocated through the shim directly
// (torch::stable::empty and empty_like are boxed aten calls through the dispatcher: the
// larger part of a small op's host time).
inline torch::stable::Tensor empty_dense(const int64_t* sizes, int64_t ndim, MemoryFormat format,
                                         const torch::stable::Tensor& like) {
  std::array<int64_t, 16> small{};
  std::unique_ptr<int64_t[]> large;
  int64_t* strides = small.data();
  if (ndim > static_cast<int64_t>(small.size())) {
    large = std::make_unique<int64_t[]>(ndim);
    strides = large.get();
  }
  const auto extent = [&](int64_t d) { return sizes[d] > 1 ? sizes[d] : int64_t(1); };
  int64_t step = 1;
  if (format == MemoryFormat::ChannelsLast && ndim == 4) {
    for (const int64_t d : {1, 3, 2, 0}) {
      strides[d] = step;
      step *= extent(d);
    }
  } else {
    for (int64_t d = ndim - 1; d >= 0; --d) {
      strides[d] = step;
      step *= extent(d);
    }
  }
  int32_t dtype = 0, device_type = 0, device_index = 0;
  STD_TORCH_CHECK(aoti_torch_get_dtype(like.get(), &dtype) == AOTI_TORCH_SUCCESS &&
                      aoti_torch_get_device_type(like.get(), &device_type) == AOTI_TORCH_SUCCESS &&
                      aoti_torch_get_device_index(like.get(), &device_index) == AOTI_TORCH_SUCCESS,
                  "reading a tensor's dtype and device failed");
  AtenTensorHandle out = nullptr;
  STD_TORCH_CHECK(aoti_torch_empty_strided(ndim, sizes, strides, dtype, device_type, device_index,
                                           &out) == AOTI_TORCH_SUCCESS,
                  "allocating a tensor of ", ndim, " dimensions failed");
  return torch::stable::Tensor(out);
}

// An uninitialised contiguous tensor of t's shape, dtype and device (empty_dense).
inline torch::stable::Tensor empty_contiguous_like(const torch::stable::Tensor& t) {
  return empty_dense(t.sizes().data(), t.dim(), MemoryFormat::Contiguous, t);
}

// A copy of t in dtype (a no-op when t has it already).
inline torch::stable::Tensor to_dtype(const torch::stable::Tensor& t,
                                      torch::headeronly::ScalarType dtype) {
  return t.scalar_type() == dtype ? t : torch::stable::to(t, dtype);
}

}  // namespace ops_common
