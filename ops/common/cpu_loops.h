#pragma once
// Elementwise CPU loop shared by the activation ops: out[i] = f(in_0[i], ..., in_k[i])
// over contiguous buffers, split across threads by at::parallel_for. The inner loop is
// plain code that GCC vectorises; it is compiled three times, for AVX-512, AVX2+FMA
// and the baseline ISA, and the CPU picks one at load time, because cached builds are
// shared across machines and so cannot be built with -mavx2 or -march=native.
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>

// x86-64-v* clones need GCC 12; older compilers and clang get the baseline loop only.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 12
#define OPS_CPU_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPS_CPU_MULTIVERSION
#endif

namespace ops_common {

// Elements per task: large enough that a task outweighs the scheduling cost,
// small enough that a few MB already spread over every core.
constexpr int64_t kCpuGrainSize = 1 << 15;

// How the loop reads and writes one dtype, computing in its opmath type.
template <typename T>
struct CpuStorage {
  using type = T;
  static at::opmath_type<T> load(T v) { return static_cast<at::opmath_type<T>>(v); }
  static T store(at::opmath_type<T> v) { return static_cast<T>(v); }
};

// c10::Half's conversions keep a float operation under a condition, which GCC
// compiles to a branch, so the loop stays scalar (12x slower than ATen's own
// kernels). These are the same IEEE conversions, round to nearest even, bit for bit,
// with every operation unconditional and the results picked by bit masks (a ?: is
// enough for GCC to move the float operation feeding it under a branch).
template <>
struct CpuStorage<c10::Half> {
  using type = uint16_t;

  static uint32_t select(bool condition, uint32_t if_true, uint32_t if_false) {
    const uint32_t mask = 0u - static_cast<uint32_t>(condition);
    return (if_true & mask) | (if_false & ~mask);
  }

  static float load(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t magnitude = h & 0x7fffu;
    const uint32_t shifted = magnitude << 13;
    float scaled;
    std::memcpy(&scaled, &shifted, sizeof(scaled));
    scaled *= 0x1p112f;  // rebias the exponent; subnormal halves come out normal
    uint32_t bits;
    std::memcpy(&bits, &scaled, sizeof(bits));
    bits |= select(magnitude >= 0x7c00u, 0x7f800000u, 0u) | sign;
    float out;
    std::memcpy(&out, &bits, sizeof(out));
    return out;
  }

  static uint16_t store(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const uint32_t sign = bits & 0x80000000u;
    const uint32_t magnitude = bits ^ sign;
    // Subnormal half: adding 0.5 (whose ulp is 2^-24, the smallest half subnormal)
    // lets the float adder round the mantissa into the low bits.
    float a;
    std::memcpy(&a, &magnitude, sizeof(a));
    const float sum = a + 0.5f;
    uint32_t sum_bits;
    std::memcpy(&sum_bits, &sum, sizeof(sum_bits));
    const uint32_t subnormal = sum_bits - 0x3f000000u;
    // Normal half: rebias the exponent by -112 and round to nearest even at bit 13.
    const uint32_t normal = (magnitude + 0xc8000fffu + ((magnitude >> 13) & 1u)) >> 13;
    const uint32_t inf_or_nan = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
    const uint32_t finite = select(magnitude < 0x38800000u, subnormal, normal);
    return static_cast<uint16_t>(select(magnitude >= 0x47800000u, inf_or_nan, finite) | (sign >> 16));
  }
};

template <typename Storage, typename F, typename T, typename... In>
OPS_CPU_MULTIVERSION void map_contiguous(F f, int64_t n, T* __restrict__ out, const In* __restrict__... in) {
  for (int64_t i = 0; i < n; ++i) out[i] = Storage::store(f(Storage::load(in[i])...));
}

template <typename F, typename scalar_t, typename... In>
void parallel_map(F f, int64_t n, scalar_t* out, const In*... in) {
  using Storage = CpuStorage<scalar_t>;
  using T = typename Storage::type;
  at::parallel_for(0, n, kCpuGrainSize, [&](int64_t begin, int64_t end) {
    map_contiguous<Storage>(f, end - begin, reinterpret_cast<T*>(out) + begin,
                            (reinterpret_cast<const T*>(in) + begin)...);
  });
}

}  // namespace ops_common
