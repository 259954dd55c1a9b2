#pragma once
// Elementwise CPU loop shared by the pointwise ops: out[i] = Op(in_0[i], ..., in_k[i])
// over contiguous buffers, split across threads by at::parallel_for. The inner loop is
// plain code that GCC vectorises, compiled once per CPU capability (cpu_dispatch.h);
// 16-bit data is loaded to float and rounded back once with the branch-free
// conversions of cpu_convert.h.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

#include "common/cpu_convert.h"
#include "common/cpu_dispatch.h"

namespace ops_common {

// Elements per task: large enough that a task outweighs the scheduling cost,
// small enough that a few MB already spread over every core.
constexpr int64_t kCpuGrainSize = 1 << 15;

// How the loop reads and writes one dtype (as its bits for 16-bit types), and the type
// it computes in.
template <typename T>
struct CpuStorage {
  using type = T;
  using compute = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};

template <>
struct CpuStorage<c10::Half> {
  using type = uint16_t;
  using compute = float;
  static float load(uint16_t h) { return half_bits_to_float(h); }
  static uint16_t store(float f) { return float_to_half_bits(f); }
};

template <>
struct CpuStorage<c10::BFloat16> {
  using type = uint16_t;
  using compute = float;
  static float load(uint16_t b) { return bfloat16_bits_to_float(b); }
  static uint16_t store(float f) { return float_to_bfloat16_bits(f); }
};

// The host math ignores kFast (see scalar_math.h), so Op runs with false.
template <typename Storage, typename Op, typename T, typename... In>
OPS_CPU_BODY void map_contiguous_body(Storage, Op, int64_t n, T* __restrict__ out,
                                      const In* __restrict__... in) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = Storage::store(Op::template apply<false>(Storage::load(in[i])...));
  }
}

OPS_CPU_CLONES(map_contiguous, map_contiguous_body)

// out[i] = Op::apply(in[i]...) for i < n, on all threads.
template <typename Op, typename scalar_t, typename... In>
void parallel_map(int64_t n, scalar_t* out, const In*... in) {
  using Storage = CpuStorage<scalar_t>;
  using T = typename Storage::type;
  at::parallel_for(0, n, kCpuGrainSize, [&](int64_t begin, int64_t end) {
    map_contiguous(Storage{}, Op{}, end - begin, reinterpret_cast<T*>(out) + begin,
                   (reinterpret_cast<const T*>(in) + begin)...);
  });
}

}  // namespace ops_common
