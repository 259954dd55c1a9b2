#pragma once
// Elementwise CPU loop shared by the pointwise ops: out[i] = Op(in_0[i], ..., in_k[i])
// over contiguous buffers, split across threads by torch::stable::parallel_for (torch's
// intra-op pool, as at::parallel_for). The inner loop is
// plain code that GCC vectorises, compiled once per CPU capability (cpu_dispatch.h);
// 16-bit data is loaded to float and rounded back once with the branch-free
// conversions of cpu_convert.h, and computed with the fast exp (kFastMath), as on CUDA.
// The loop runs in blocks of kCpuBlock elements, unrolled: an op's math is one long
// dependent chain per vector (an exp and a division), and a block gives the core several
// independent chains to overlap (sigmoid: faster than one vector at a time on the 2-core
// AMD EPYC development machine; the loops' figures: experiments/RESULTS.md, "sigmoid and
// GELU").
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "common/cpu_convert.h"
#include "common/cpu_dispatch.h"
#include "common/scalar_math.h"

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

#if defined(__x86_64__) && defined(__GNUC__)
// Half <-> float through the F16C instructions, 8 at a time (the AVX2 and AVX-512
// clones have them): GCC does not vectorise the bit-level conversions of
// cpu_convert.h as well as it does bfloat16's shifts. Same rounding (to nearest even).
OPS_TARGET_AVX2 inline void half_to_float_f16c(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
  }
  for (; i < n; ++i) out[i] = half_bits_to_float(in[i]);
}

OPS_TARGET_AVX2 inline void float_to_half_f16c(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = float_to_half_bits(in[i]);
}
#endif

constexpr int64_t kCpuTile = 512;
constexpr int64_t kCpuBlock = 32;

// out[i] = f(in[i]...) for i < n, in unrolled blocks of kCpuBlock and a plain tail.
template <typename F, typename T, typename... In>
OPS_CPU_BODY void map_blocked(F f, int64_t n, T* __restrict__ out, const In* __restrict__... in) {
  int64_t i = 0;
  for (; i + kCpuBlock <= n; i += kCpuBlock) {
#pragma GCC unroll 64
    for (int64_t j = 0; j < kCpuBlock; ++j) out[i + j] = f(in[i + j]...);
  }
  for (; i < n; ++i) out[i] = f(in[i]...);
}

template <typename Op, bool kFast, size_t... I>
OPS_CPU_BODY void apply_tile(const float (&tiles)[sizeof...(I)][kCpuTile], float* __restrict__ out,
                             int64_t n, std::index_sequence<I...>) {
  const auto f = [](auto... v) __attribute__((always_inline)) {
    return Op::template apply<kFast>(v...);
  };
  map_blocked(f, n, out, tiles[I]...);
}

template <typename Tag, typename Storage, typename Op, typename T, typename... In>
OPS_CPU_BODY void map_contiguous_body(Tag, Storage, Op, int64_t n, T* __restrict__ out,
                                      const In* __restrict__... in) {
  constexpr bool kFast = kFastMath<T, typename Storage::compute>;
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same_v<Storage, CpuStorage<c10::Half>> && Tag::value != CpuIsa::kBaseline) {
    // Half in tiles: convert in, compute in float (vectorised), convert out.
    float tiles[sizeof...(In)][kCpuTile];
    float result[kCpuTile];
    for (int64_t i0 = 0; i0 < n; i0 += kCpuTile) {
      const int64_t m = std::min(kCpuTile, n - i0);
      int a = 0;
      (half_to_float_f16c(in + i0, tiles[a++], m), ...);
      apply_tile<Op, kFast>(tiles, result, m, std::index_sequence_for<In...>{});
      float_to_half_f16c(result, out + i0, m);
    }
    return;
  }
#endif
  const auto f = [](auto... v) __attribute__((always_inline)) {
    return Storage::store(Op::template apply<kFast>(Storage::load(v)...));
  };
  map_blocked(f, n, out, in...);
}

OPS_CPU_CLONES(map_contiguous, map_contiguous_body)

// out[i] = Op::apply(in[i]...) for i < n, on all threads.
template <typename Op, typename scalar_t, typename... In>
void parallel_map(int64_t n, scalar_t* out, const In*... in) {
  using Storage = CpuStorage<scalar_t>;
  using T = typename Storage::type;
  torch::stable::parallel_for(0, n, kCpuGrainSize, [&](int64_t begin, int64_t end) {
    map_contiguous(Storage{}, Op{}, end - begin, reinterpret_cast<T*>(out) + begin,
                   (reinterpret_cast<const T*>(in) + begin)...);
  });
}

// The loops common/pointwise.h declares for the host side.
template <typename Op, typename T>
void map_cpu(int64_t n, T* out, const T* in) {
  parallel_map<Op>(n, out, in);
}

template <typename Op, typename T>
void map_cpu(int64_t n, T* out, const T* a, const T* b) {
  parallel_map<Op>(n, out, a, b);
}

}  // namespace ops_common

// Compiles map_cpu for one op's math in every floating dtype the host side dispatches
// to, with one input (a forward) or two (a backward: grad and the saved tensor).
#define OPS_INSTANTIATE_CPU_TYPE(Op, T, ...) \
  template void ops_common::map_cpu<Op, T>(int64_t, T*, __VA_ARGS__);
#define OPS_INSTANTIATE_CPU_TYPES(Op, INPUTS)              \
  OPS_INSTANTIATE_CPU_TYPE(Op, float, INPUTS(float))       \
  OPS_INSTANTIATE_CPU_TYPE(Op, double, INPUTS(double))     \
  OPS_INSTANTIATE_CPU_TYPE(Op, c10::Half, INPUTS(c10::Half)) \
  OPS_INSTANTIATE_CPU_TYPE(Op, c10::BFloat16, INPUTS(c10::BFloat16))
#define OPS_CPU_ONE_INPUT(T) const T*
#define OPS_CPU_TWO_INPUTS(T) const T*, const T*
#define OPS_INSTANTIATE_CPU_UNARY(Op) OPS_INSTANTIATE_CPU_TYPES(Op, OPS_CPU_ONE_INPUT)
#define OPS_INSTANTIATE_CPU_BINARY(Op) OPS_INSTANTIATE_CPU_TYPES(Op, OPS_CPU_TWO_INPUTS)
