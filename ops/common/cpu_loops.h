#pragma once
// Elementwise CPU loop shared by the pointwise ops: out[i] = Op(in_0[i], ..., in_k[i])
// over contiguous buffers, split across torch's intra-op threads (parallel_for below, as
// at::parallel_for). The inner loop is
// plain code that GCC vectorises, compiled once per CPU capability (cpu_dispatch.h);
// 16-bit data is loaded to float and rounded back once with the branch-free
// conversions of cpu_convert.h, and computed with the fast exp (kFastMath), as on CUDA.
// The loop runs in blocks of kCpuBlock elements, unrolled: an op's math is one long
// dependent chain per vector (an exp and a division), and a block gives the core several
// independent chains to overlap (sigmoid: faster than one vector at a time on the 2-core
// AMD EPYC development machine; the loops' figures: experiments/RESULTS.md, "sigmoid and
// GELU").
//
// Torch-free, and light to compile: a unit of CPU loops (<op>_cpu.cpp) that includes this
// and the op's math and no torch header is a torch-free unit, which the loader compiles
// without the precompiled torch headers and without its registry header (a tenth of a
// second of headers instead of about a second). So no torch header here: the threads
// come from torch's stable C function torch_parallel_for (declared below as torch
// declares it), c10::Half and c10::BFloat16 are named only (the loops see their bits),
// and F16C is reached through GCC's builtins rather than <immintrin.h>.
#include <cstdint>
#include <type_traits>
#include <utility>

#include <dlfcn.h>

#include "common/cpu_convert.h"
#include "common/cpu_dispatch.h"
#include "common/scalar_math.h"

namespace c10 {
struct Half;
struct BFloat16;
}  // namespace c10

// torch/csrc/stable/c/shim.h (since torch 2.10): at::parallel_for over a C callback.
extern "C" int32_t torch_parallel_for(int64_t begin, int64_t end, int64_t grain_size,
                                      void (*func)(int64_t begin, int64_t end, void* ctx),
                                      void* ctx);

namespace ops_common {

// f(begin, end) over [begin, end) split across torch's intra-op threads, as
// torch::stable::parallel_for; an error comes back as a CpuError with torch's message.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const F& f) {
  const auto callback = [](int64_t b, int64_t e, void* ctx) { (*static_cast<const F*>(ctx))(b, e); };
  if (torch_parallel_for(begin, end, grain_size, callback,
                         const_cast<void*>(static_cast<const void*>(&f))) != 0) {
    // torch keeps the message from 2.13 on; looked up by name, so that earlier ones load.
    using Getter = const char* (*)();
    const auto get = reinterpret_cast<Getter>(
        dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
    const char* what = get != nullptr ? get() : nullptr;
    throw CpuError(what != nullptr ? what : "torch_parallel_for failed (torch gave no reason)");
  }
}

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
// The builtins are what <immintrin.h>'s _mm256_cvtph_ps and _mm256_cvtps_ph expand to.
typedef short HalfBits8 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));

OPS_TARGET_AVX2 inline void half_to_float_f16c(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    HalfBits8 halves;
    __builtin_memcpy(&halves, in + i, sizeof(halves));
    const Float8 floats = __builtin_ia32_vcvtph2ps256(halves);
    __builtin_memcpy(out + i, &floats, sizeof(floats));
  }
  for (; i < n; ++i) out[i] = half_bits_to_float(in[i]);
}

OPS_TARGET_AVX2 inline void float_to_half_f16c(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Float8 floats;
    __builtin_memcpy(&floats, in + i, sizeof(floats));
    const HalfBits8 halves = __builtin_ia32_vcvtps2ph256(floats, 0);  // 0: to nearest even
    __builtin_memcpy(out + i, &halves, sizeof(halves));
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
      const int64_t m = n - i0 < kCpuTile ? n - i0 : kCpuTile;
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
#if defined(OPS_CPU_CLONE_ISA)
  check_cpu_clone();  // here, where its message reaches the caller whatever torch's version
#endif
  parallel_for(0, n, kCpuGrainSize, [&](int64_t begin, int64_t end) {
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
//
// One dtype per object: the loader compiles a unit that uses OPS_INSTANTIATE_CPU_UNARY or
// _BINARY four times side by side, with -DOPS_CPU_SLICE=0..3 (jit_tools/sources.py,
// dtype_slices), and slice k instantiates the k-th dtype only, so a math edit's CPU loops
// compile in the time of the slowest dtype. Without the define (the AOT wheels) one object
// holds all four. Whatever else such a unit defines is compiled into every slice: it must
// be a template, inline or in an anonymous namespace (else the link reports it twice).
#if !defined(OPS_CPU_SLICE) || OPS_CPU_SLICE == 0
#define OPS_CPU_SLICE_0(...) __VA_ARGS__
#else
#define OPS_CPU_SLICE_0(...)
#endif
#if !defined(OPS_CPU_SLICE) || OPS_CPU_SLICE == 1
#define OPS_CPU_SLICE_1(...) __VA_ARGS__
#else
#define OPS_CPU_SLICE_1(...)
#endif
#if !defined(OPS_CPU_SLICE) || OPS_CPU_SLICE == 2
#define OPS_CPU_SLICE_2(...) __VA_ARGS__
#else
#define OPS_CPU_SLICE_2(...)
#endif
#if !defined(OPS_CPU_SLICE) || OPS_CPU_SLICE == 3
#define OPS_CPU_SLICE_3(...) __VA_ARGS__
#else
#define OPS_CPU_SLICE_3(...)
#endif
#define OPS_INSTANTIATE_CPU_TYPE(Op, T, ...) \
  template void ops_common::map_cpu<Op, T>(int64_t, T*, __VA_ARGS__);
#define OPS_INSTANTIATE_CPU_TYPES(Op, INPUTS)                                    \
  OPS_CPU_SLICE_0(OPS_INSTANTIATE_CPU_TYPE(Op, float, INPUTS(float)))           \
  OPS_CPU_SLICE_1(OPS_INSTANTIATE_CPU_TYPE(Op, double, INPUTS(double)))         \
  OPS_CPU_SLICE_2(OPS_INSTANTIATE_CPU_TYPE(Op, c10::Half, INPUTS(c10::Half))) \
  OPS_CPU_SLICE_3(OPS_INSTANTIATE_CPU_TYPE(Op, c10::BFloat16, INPUTS(c10::BFloat16)))
#define OPS_CPU_ONE_INPUT(T) const T*
#define OPS_CPU_TWO_INPUTS(T) const T*, const T*
#define OPS_INSTANTIATE_CPU_UNARY(Op) OPS_INSTANTIATE_CPU_TYPES(Op, OPS_CPU_ONE_INPUT)
#define OPS_INSTANTIATE_CPU_BINARY(Op) OPS_INSTANTIATE_CPU_TYPES(Op, OPS_CPU_TWO_INPUTS)
