#pragma once
// torch's scalar types as the storage types that torch-free CUDA launchers take
// (common/cuda_types.h: c10::Half / c10::BFloat16 have the bit layout of half_t /
// bfloat16_t), and a tensor's data as that type: for the host side of both ABIs
// (common/cuda_host.h on ATen, common/stable_cuda_host.h on the stable ABI).
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "common/cuda_types.h"

namespace ops_common {

template <typename T> struct cuda_type { using type = T; };
template <> struct cuda_type<c10::Half> { using type = half_t; };
template <> struct cuda_type<c10::BFloat16> { using type = bfloat16_t; };
template <typename T> using cuda_t = typename cuda_type<T>::type;

// A tensor's data (an at::Tensor or a torch::stable::Tensor) as the CUDA type its launcher
// takes.
template <typename scalar_t, typename Tensor>
inline cuda_t<scalar_t>* cuda_ptr(Tensor& t) {
  return reinterpret_cast<cuda_t<scalar_t>*>(t.template mutable_data_ptr<scalar_t>());
}
template <typename scalar_t, typename Tensor>
inline const cuda_t<scalar_t>* cuda_ptr(const Tensor& t) {
  return reinterpret_cast<const cuda_t<scalar_t>*>(t.template const_data_ptr<scalar_t>());
}

}  // namespace ops_common
