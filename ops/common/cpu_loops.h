#pragma once
// Elementwise CPU loop shared by the activation ops: out[i] = f(in_0[i], ..., in_k[i])
// over contiguous buffers, split across threads by at::parallel_for. The inner loop is
// plain code that GCC vectorises; it is compiled twice, for AVX2+FMA and for the
// baseline ISA, and the CPU picks one at load time, because cached builds are shared
// across machines and so cannot be built with -mavx2 or -march=native.
#include <ATen/Parallel.h>

#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define OPS_CPU_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define OPS_CPU_MULTIVERSION
#endif

namespace ops_common {

// Elements per task: large enough that a task outweighs the scheduling cost,
// small enough that a few MB already spread over every core.
constexpr int64_t kCpuGrainSize = 1 << 15;

template <typename F, typename scalar_t, typename... In>
OPS_CPU_MULTIVERSION void map_contiguous(F f, int64_t n, scalar_t* __restrict__ out,
                                         const In* __restrict__... in) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]...);
}

template <typename F, typename scalar_t, typename... In>
void parallel_map(F f, int64_t n, scalar_t* out, const In*... in) {
  at::parallel_for(0, n, kCpuGrainSize, [&](int64_t begin, int64_t end) {
    map_contiguous(f, end - begin, out + begin, (in + begin)...);
  });
}

}  // namespace ops_common
