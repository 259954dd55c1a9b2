#pragma once
// One CPU multiversioning scheme for every op's vectorised loops. Cached builds are
// shared across machines, so they cannot be built with -mavx2 or -march=native; instead
// a loop body is compiled three times (the x86-64 baseline, AVX2+FMA, AVX-512) and each
// call takes the clone that ATen's own kernels use: the best the CPU has, unless the
// environment variable ATEN_CPU_CAPABILITY=default|avx2|avx512 asks for less, read here
// as ATen reads it (torch-free, so that stable-ABI units use it too; ATen trusts that
// variable, here a clone the CPU cannot run is never taken). The baseline (SSE2) runs
// the same loops about 4x slower than AVX2.
//
//   OPS_CPU_CLONES(name, body): defines name(args...), which calls the always-inline
//   function template body(CpuIsaTag<isa>{}, args...) compiled for the capability in force.
//   A body that uses a capability's instructions directly tests the tag (under if
//   constexpr); others ignore it.
//
// A JIT build runs where it was compiled: the loader defines OPS_CPU_CLONE as the clone
// this machine takes (0 baseline, 1 AVX2, 2 AVX-512; its cache key names it, so a machine
// that takes another builds its own), and only that clone is compiled, a third of the
// CPU loops' compile on every edit of an op's math. Builds without it (the AOT wheels of
// deploy/setup.py) keep all three.
//
// Light to compile (no <string>, no <stdexcept>): the CPU-loop units that include it
// parse a tenth of a second of headers (cpu_loops.h).
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace ops_common {

// An error of the CPU loops, its message kept in place.
class CpuError : public std::exception {
 public:
  explicit CpuError(const char* what) { std::snprintf(what_, sizeof(what_), "%s", what); }
  const char* what() const noexcept override { return what_; }

 private:
  char what_[512];
};

// Whether a and b are the same word, upper or lower case alike.
inline bool same_word(const char* a, const char* b) {
  for (; *a != '\0' && *b != '\0'; ++a, ++b) {
    const char x = (*a >= 'a' && *a <= 'z') ? static_cast<char>(*a - 'a' + 'A') : *a;
    const char y = (*b >= 'a' && *b <= 'z') ? static_cast<char>(*b - 'a' + 'A') : *b;
    if (x != y) return false;
  }
  return *a == *b;
}

enum class CpuIsa { kBaseline, kAvx2, kAvx512 };

inline const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    default: return "default";
  }
}

template <CpuIsa kIsa>
struct CpuIsaTag {
  static constexpr CpuIsa value = kIsa;
};

// The clone in force for this process: ATen's capability, capped at what the CPU has.
inline CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
#if defined(__x86_64__) && defined(__GNUC__)
    const char* env = std::getenv("ATEN_CPU_CAPABILITY");
    const char* capability = env != nullptr && *env != '\0' ? env : "avx512";
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq");
    const bool wants512 = same_word(capability, "avx512");
    if (wants512 && avx512) return CpuIsa::kAvx512;
    if ((wants512 || same_word(capability, "avx2")) && avx2) return CpuIsa::kAvx2;
#endif
    return CpuIsa::kBaseline;
  }();
  return isa;
}

}  // namespace ops_common

// One clone: fn(args...) compiled with target (a function attribute, or nothing), calling
// body with the tag of isa. Every mode below defines its clones with it.
#define OPS_CPU_DEFINE_CLONE(fn, target, isa, body)  \
  template <typename... Args>                        \
  target void fn(Args... args) {                     \
    body(::ops_common::CpuIsaTag<isa>{}, args...);   \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#define OPS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2")))
#define OPS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,bmi,bmi2")))
#endif

#if defined(__x86_64__) && defined(__GNUC__) && defined(OPS_CPU_CLONE)
#if OPS_CPU_CLONE == 2
#define OPS_CPU_CLONE_ISA ::ops_common::CpuIsa::kAvx512
#define OPS_CPU_CLONE_TARGET OPS_TARGET_AVX512
#elif OPS_CPU_CLONE == 1
#define OPS_CPU_CLONE_ISA ::ops_common::CpuIsa::kAvx2
#define OPS_CPU_CLONE_TARGET OPS_TARGET_AVX2
#else
#define OPS_CPU_CLONE_ISA ::ops_common::CpuIsa::kBaseline
#define OPS_CPU_CLONE_TARGET
#endif
namespace ops_common {
// The one clone of a JIT build needs its capability: a library copied to a machine (or run
// under an ATEN_CPU_CAPABILITY) that lacks it says so instead of running illegal code.
inline void check_cpu_clone() {
  if (static_cast<int>(cpu_isa()) < static_cast<int>(OPS_CPU_CLONE_ISA)) {
    char what[256];
    std::snprintf(what, sizeof(what),
                  "this op's CPU loops were built for %s, which this process cannot run (%s); "
                  "load it again to build for it",
                  cpu_isa_name(OPS_CPU_CLONE_ISA), cpu_isa_name(cpu_isa()));
    throw CpuError(what);
  }
}
}  // namespace ops_common
#define OPS_CPU_CLONES(name, body)                                                 \
  OPS_CPU_DEFINE_CLONE(name##_clone, OPS_CPU_CLONE_TARGET, OPS_CPU_CLONE_ISA, body) \
  template <typename... Args>                                                      \
  void name(Args... args) {                                                        \
    ::ops_common::check_cpu_clone();                                               \
    name##_clone(args...);                                                         \
  }
#elif defined(__x86_64__) && defined(__GNUC__)
#define OPS_CPU_CLONES(name, body)                                                      \
  OPS_CPU_DEFINE_CLONE(name##_baseline, , ::ops_common::CpuIsa::kBaseline, body)        \
  OPS_CPU_DEFINE_CLONE(name##_avx2, OPS_TARGET_AVX2, ::ops_common::CpuIsa::kAvx2, body) \
  OPS_CPU_DEFINE_CLONE(name##_avx512, OPS_TARGET_AVX512, ::ops_common::CpuIsa::kAvx512, \
                       body)                                                            \
  template <typename... Args>                                                           \
  void name(Args... args) {                                                             \
    switch (::ops_common::cpu_isa()) {                                                  \
      case ::ops_common::CpuIsa::kAvx512: return name##_avx512(args...);                \
      case ::ops_common::CpuIsa::kAvx2: return name##_avx2(args...);                    \
      default: return name##_baseline(args...);                                         \
    }                                                                                   \
  }
#else
#define OPS_CPU_CLONES(name, body) \
  OPS_CPU_DEFINE_CLONE(name, , ::ops_common::CpuIsa::kBaseline, body)
#endif

// For loop bodies: inlined into each clone, so each is compiled for that clone's ISA.
#define OPS_CPU_BODY __attribute__((always_inline)) inline
