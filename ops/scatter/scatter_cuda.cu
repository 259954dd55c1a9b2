// CUDA kernels of the scatter reductions; torch-free (CUDA headers and the op's own only).
// The host side (scatter_cuda.cpp) picks the route:
//   segment_kernel     index sorted along dim (or read through a stable sort permutation, the
//                      deterministic route): each output element finds its segment
//                      (rowptr_kernel's table where the index is one per row, else binary
//                      search) and reduces it in order. No atomics, every output written once.
//   atomic_sum_kernel  sum/mean in any order: one atomic add per element, 16 bytes at a time
//                      on sm_90 (float4 atomics), so a 64-feature row costs 16 atomics, not 64.
//   extreme_*_kernel   max/min in any order: one atomicMax/atomicMin per element on
//                      order-preserving keys, skipped when a plain read of the key shows it
//                      cannot win (most do not). 32-bit keys (values only) live in the float
//                      output itself; 64-bit keys put the value bits above position bits, so
//                      one atomic yields value and arg (ties to the first position).
// The segment kernel reduces through SegmentAcc/accumulate/store_segment; the atomic kernels
// visit src through for_each_in_range; values-only and value+arg share the extreme kernels.
// Out-of-range indices are skipped by every kernel, checked or not: never a wild write.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/cuda_convert.cuh"
#include "common/launch.h"
#include "scatter.h"
#include "scatter_cuda.h"

namespace scatter {
namespace {

using ops_common::acc_t;
using ops_common::from_acc;
using ops_common::to_acc;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;
// Atomic sums of up to this many src elements check bounds inside the scatter kernel (one
// launch fewer: a small graph's scatter is host-bound); larger ones run check_kernel first.
constexpr int64_t kFusedCheckElements = int64_t(1) << 16;

// Integer storage accumulates in itself (cuda_convert.cuh covers the floating types).
__device__ __forceinline__ int to_acc(int v) { return v; }
__device__ __forceinline__ int64_t to_acc(int64_t v) { return v; }

template <typename A>
constexpr bool kIntegral = A(1) / A(2) == A(0);

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// VEC keys read from L2 (not L1, which may hold a stale line), 16 bytes per load where
// VEC allows; the pointer is then 16-byte aligned (K and k0 are multiples of VEC).
template <int VEC, typename Key>
__device__ __forceinline__ void load_keys(const Key* p, Key (&out)[VEC]) {
  constexpr int kPer16 = int(16 / sizeof(Key));
  using Wide = std::conditional_t<sizeof(Key) == 4, uint4, ulonglong2>;
  if constexpr (VEC % kPer16 == 0) {
#pragma unroll
    for (int q = 0; q < VEC / kPer16; ++q) {
      const Wide u = __ldcg(reinterpret_cast<const Wide*>(p) + q);
      memcpy(out + kPer16 * q, &u, sizeof(u));
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = __ldcg(p + j);
  }
}

// Elements per 16-byte load where the index is broadcast over K.
template <typename T, bool VECTOR>
constexpr int vec_width() {
  return VECTOR ? int(16 / sizeof(T)) : 1;
}

template <typename A>
__device__ __forceinline__ A divide(A sum, int64_t count) {
  const int64_t c = count > 0 ? count : 1;
  if constexpr (kIntegral<A>) {  // integers: floor division, as torch's "floor"
    A q = sum / A(c);
    if ((sum % A(c) != 0) && (sum < 0)) q -= 1;
    return q;
  } else {
    return sum / A(c);
  }
}

// q = a / d, r = a % d for a >= 0, d > 0: in 32 bits when both fit (the usual case),
// where a 64-bit division costs several times as many instructions.
__device__ __forceinline__ void divmod(int64_t a, int64_t d, int64_t& q, int64_t& r) {
  if (((a | d) >> 31) == 0) {
    const unsigned int q32 = static_cast<unsigned int>(a) / static_cast<unsigned int>(d);
    q = q32;
    r = a - int64_t(q32) * d;
  } else {
    q = a / d;
    r = a - q * d;
  }
}

// Grid-stride over [0, total): f(i) for each index of this thread.
template <typename F>
__device__ __forceinline__ void for_each_index(int64_t total, F&& f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    f(i);
  }
}

// Grid-stride over the flat positions i of a [rows, cols, inner / VEC] extent, VEC inner
// elements at a time: f(r, c, k, rc, i) for each position of this thread, with k the first
// of its VEC inner elements and rc = r * cols + c.
template <int VEC = 1, typename F>
__device__ __forceinline__ void for_each_position(int64_t rows, int64_t cols, int64_t inner,
                                                  F&& f) {
  const int64_t inner_vectors = inner / VEC;
  for_each_index(rows * cols * inner_vectors, [&](int64_t i) {
    int64_t k, rc, r, c;
    divmod(i, inner_vectors, rc, k);
    k *= VEC;
    divmod(rc, cols, r, c);
    f(r, c, k, rc, i);
  });
}

__device__ void record(IndexError* error, IndexErrorKind kind, int64_t value, int64_t position,
                       int64_t dim_size) {
  // One thread claims the record (kind 0 -> -1), fills it, and raises flag last, after a
  // system-wide fence, so the host never reads a half-written record.
  if (atomicCAS(&error->kind, 0, -1) != 0) return;
  error->value = value;
  error->position = position;
  error->dim_size = dim_size;
  __threadfence_system();
  *reinterpret_cast<volatile int*>(&error->kind) = static_cast<int>(kind);
  __threadfence_system();
  *reinterpret_cast<volatile int*>(&error->flag) = 1;
}

// VEC elements of T at p, 16 bytes per load where VEC > 1 (p is then 16-byte aligned: K and
// k0 are multiples of VEC). STREAM: src rows read once, so they skip L1 and ask L2 to fetch
// 256 bytes around each miss.
template <bool STREAM, typename T, int VEC>
__device__ __forceinline__ void load_row(const T* p, T (&v)[VEC]) {
  if constexpr (VEC > 1) {
    static_assert(sizeof(Vec<T, VEC>) == 16, "vector loads are 16 bytes");
    Vec<T, VEC> x;
    if constexpr (STREAM) {
      uint4 u;
      asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
          : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
          : "l"(p));
      memcpy(&x, &u, sizeof(x));
    } else {
      x = *reinterpret_cast<const Vec<T, VEC>*>(p);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = x.v[j];
  } else {
    v[0] = *p;
  }
}

// ------------------------------------------------------------------ segment reductions

// Running reduction of VEC features over one segment, in position order: a sum, or the
// extreme and its position (arg = E while nothing was taken). With has_init the output's
// own value starts it and, for max/min, wins ties.
template <typename T, Reduce R, int VEC>
struct SegmentAcc {
  using A = acc_t<T>;
  static constexpr bool kExtreme = R == Reduce::kMax || R == Reduce::kMin;
  A value[VEC];
  int64_t arg[VEC];
  bool has_init;
  int64_t E;

  __device__ __forceinline__ SegmentAcc(const A* init, int64_t E_) : has_init(init != nullptr), E(E_) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      value[j] = init ? init[j] : A(0);
      arg[j] = E;
    }
  }

  __device__ __forceinline__ void add(const T (&v)[VEC], int64_t e) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const A x = to_acc(v[j]);
      if constexpr (!kExtreme) {
        value[j] += x;
      } else if ((!has_init && arg[j] == E) || better<R>(x, value[j])) {
        value[j] = x;
        arg[j] = e;
      }
    }
  }
};

// Adds positions [first, end): rows of src_row (K elements apart), read through perm (perm_e
// apart) where given (each src row is read once). visit(p) sees each
// position first (a check that reads the index); it must have no side effects, so the loads
// of several iterations stay in flight together. Streaming loads for sum and mean, where they
// measured faster; max and min ran at the same speed with plain loads.
template <typename T, Reduce R, int VEC, typename Visit>
__device__ __forceinline__ void accumulate(SegmentAcc<T, R, VEC>& acc, const T* src_row, int64_t K,
                                           const int64_t* perm, int64_t perm_e, int64_t first,
                                           int64_t end, Visit&& visit) {
#pragma unroll 4
  for (int64_t p = first; p < end; ++p) {
    const int64_t e = perm ? perm[p * perm_e] : p;
    visit(p);
    T v[VEC];
    load_row<R == Reduce::kSum || R == Reduce::kMean>(src_row + e * K, v);
    acc.add(v, e);
  }
}

// Writes a finished segment of `length` positions to w (16-byte stores where VEC allows; w is
// then 16-byte aligned) and, for max/min where arg is given, the positions.
template <typename T, Reduce R, int VEC>
__device__ __forceinline__ void store_segment(const SegmentAcc<T, R, VEC>& acc, int64_t length,
                                              acc_t<T>* w, int64_t* arg) {
  using A = acc_t<T>;
  A result[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if constexpr (R == Reduce::kMean) {
      result[j] = divide(acc.value[j], length);
    } else {
      result[j] = acc.value[j];
    }
  }
  constexpr int kPer16 = int(16 / sizeof(A));
  if constexpr (VEC > 1 && VEC % kPer16 == 0) {
#pragma unroll
    for (int q = 0; q < VEC / kPer16; ++q) {
      Vec<A, kPer16> out;
#pragma unroll
      for (int j = 0; j < kPer16; ++j) out.v[j] = result[q * kPer16 + j];
      reinterpret_cast<Vec<A, kPer16>*>(w)[q] = out;
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) w[j] = result[j];
  }
  if constexpr (SegmentAcc<T, R, VEC>::kExtreme) {
    if (arg) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) arg[j] = acc.arg[j];
    }
  }
}

template <typename T, Reduce R, bool VECTOR>
__global__ void __launch_bounds__(kThreads)
    segment_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                   IndexStrides s, const int64_t* __restrict__ perm, Shape sh,
                   acc_t<T>* __restrict__ work, bool has_init, int64_t* __restrict__ arg,
                   int64_t* __restrict__ count, int64_t count_b, int64_t count_k,
                   IndexError* error, const int64_t* __restrict__ rowptr) {
  using A = acc_t<T>;
  constexpr int VEC = vec_width<T, VECTOR>();
  for_each_position<VEC>(sh.B, sh.N, sh.K, [&](int64_t b, int64_t n, int64_t k0, int64_t bn, int64_t) {
    int64_t start, end;
    if (rowptr) {
      // Clamped: a broken sortedness promise leaves entries unwritten, never a wild read.
      const int64_t* rp = rowptr + b * (sh.N + 1) + n;
      start = min(max(rp[0], int64_t(0)), sh.E);
      end = min(max(rp[1], start), sh.E);
    } else {
      start = lower_bound(index, s, b, k0, sh.E, n);
      end = lower_bound(index, s, b, k0, sh.E, n + 1);
    }
    if (error && !rowptr) {
      // The bounds check comes free here: the searches of n = 0 and n = N - 1 leave any
      // entry below 0 or past N outside every segment. (Binary search is monotone in the
      // value on any array, so the segments always tile [start of 0, end of N - 1].)
      if (n == 0 && start > 0) {
        const int64_t v = index_at(index, s, b, start - 1, k0);
        record(error, v < 0 ? IndexErrorKind::kOutOfRange : IndexErrorKind::kNotSorted, v,
               start - 1, sh.N);
      }
      if (n == sh.N - 1 && end < sh.E) {
        const int64_t v = index_at(index, s, b, end, k0);
        record(error, v >= sh.N ? IndexErrorKind::kOutOfRange : IndexErrorKind::kNotSorted, v,
               end, sh.N);
      }
    }
    A* w = work + bn * sh.K + k0;
    SegmentAcc<T, R, VEC> acc(has_init ? w : nullptr, sh.E);
    // A promised-sorted index that is not: every segment must hold only its own n.
    const bool verify = error != nullptr && perm == nullptr && rowptr == nullptr;
    bool misplaced = false;
    accumulate(acc, src + b * sh.E * sh.K + k0, sh.K, perm ? perm + b * s.b + k0 * s.k : nullptr,
               s.e, start, end, [&](int64_t p) {
                 if (verify) misplaced |= index_at(index, s, b, p, k0) != n;
               });
    if (misplaced) record(error, IndexErrorKind::kNotSorted, n, start, sh.N);
    if constexpr (R == Reduce::kMean) {
      // count is [Bc, N, Kc]; the threads of b = 0 (k = 0) write it where it is broadcast.
      if ((count_b > 1 || b == 0) && (count_k > 1 || k0 == 0)) {
        count[((count_b > 1 ? b : 0) * sh.N + n) * count_k + (count_k > 1 ? k0 : 0)] = end - start;
      }
    }
    store_segment(acc, end - start, w, arg ? arg + bn * sh.K + k0 : nullptr);
  });
}

// Segment starts of an index sorted along e and broadcast over K: rowptr[b, n] is the first
// position whose index is >= n (rowptr[b, N] = E), so the segment kernel reads two numbers
// instead of two binary searches. Entries outside [0, N) fall outside every segment. With
// error set it checks bounds and sortedness on the way. (A fused variant, where each block
// found its rows' segments from its own slice of the index, measured slower on an H100 and
// was not kept; the kernels' figures: experiments/RESULTS.md, section kernel-suite.)
__global__ void __launch_bounds__(kThreads)
    rowptr_kernel(const int64_t* __restrict__ index, IndexStrides s, Shape sh,
                  int64_t* __restrict__ rowptr, IndexError* error) {
  for_each_index(sh.B * (sh.E + 1), [&](int64_t i) {
    int64_t e, b;
    divmod(i, sh.E + 1, b, e);
    const int64_t prev_raw = e > 0 ? index_at(index, s, b, e - 1, 0) : int64_t(-1);
    const int64_t cur_raw = e < sh.E ? index_at(index, s, b, e, 0) : sh.N;
    if (error && e < sh.E) {
      if (cur_raw < 0 || cur_raw >= sh.N) {
        record(error, IndexErrorKind::kOutOfRange, cur_raw, b * sh.E + e, sh.N);
      } else if (e > 0 && prev_raw > cur_raw) {
        record(error, IndexErrorKind::kNotSorted, cur_raw, b * sh.E + e, sh.N);
      }
    }
    const int64_t prev = min(max(prev_raw, int64_t(-1)), sh.N);
    const int64_t cur = min(max(cur_raw, int64_t(-1)), sh.N);
    int64_t* rp = rowptr + b * (sh.N + 1);
    for (int64_t n = prev + 1; n <= cur; ++n) rp[n] = e;
  });
}

// ------------------------------------------------------------------ atomic reductions

// Calls f(e, out, v) for every VEC features v of src whose index is in range, out being
// their offset in the [B, N, K] output; grid-stride. One thread per (b, e) row of VEC
// features where the index is broadcast over K (one index load, one 16-byte src load),
// else per element. An index out of range is skipped; with CHECK it is also recorded in
// *error with its flat position in the index's own extent [Bc, E, Kc], as check_kernel
// records it (the bounds check of a small problem rides along instead of a launch of its
// own). Without CHECK the loop is the plain one: the recording slowed the atomic routes of
// large problems by 10-20% (H100), so those keep check_kernel.
template <typename T, int VEC, bool CHECK, typename F>
__device__ __forceinline__ void for_each_in_range(const T* __restrict__ src,
                                                  const int64_t* __restrict__ index,
                                                  const IndexStrides& s, const Shape& sh,
                                                  IndexError* error, F&& f) {
  for_each_position<VEC>(sh.B, sh.E, sh.K, [&](int64_t b, int64_t e, int64_t k0, int64_t be, int64_t) {
    const int64_t n = index_at(index, s, b, e, k0);
    if (n < 0 || n >= sh.N) {
      if constexpr (CHECK) {
        const int64_t count_k = s.k == 0 ? 1 : sh.K;
        const int64_t position = ((s.b == 0 ? 0 : b) * sh.E + e) * count_k + (s.k == 0 ? 0 : k0);
        record(error, IndexErrorKind::kOutOfRange, n, position, sh.N);
      }
      return;
    }
    T v[VEC];
    load_row<false>(src + be * sh.K + k0, v);
    f(e, (b * sh.N + n) * sh.K + k0, v);
  });
}

// float4 atomics (sm_90 and newer) add 16 bytes per instruction.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kHasFloat4Atomics = true;
#else
constexpr bool kHasFloat4Atomics = false;
#endif

template <typename A, int VEC>
__device__ __forceinline__ void atomic_add_vec(A* dst, const A (&v)[VEC]) {
  if constexpr (kHasFloat4Atomics && sizeof(A) == 4 && VEC % 4 == 0 && !kIntegral<A>) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {
      atomicAdd(reinterpret_cast<float4*>(dst + j), make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]));
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if constexpr (sizeof(A) == 8 && kIntegral<A>) {
        atomicAdd(reinterpret_cast<unsigned long long*>(dst + j),
                  static_cast<unsigned long long>(v[j]));
      } else {
        atomicAdd(dst + j, v[j]);
      }
    }
  }
}

template <typename T, bool VECTOR, bool CHECK>
__global__ void __launch_bounds__(kThreads)
    atomic_sum_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                      IndexStrides s, Shape sh, acc_t<T>* __restrict__ work, IndexError* error) {
  using A = acc_t<T>;
  constexpr int VEC = vec_width<T, VECTOR>();
  for_each_in_range<T, VEC, CHECK>(src, index, s, sh, error, [&](int64_t, int64_t out, const T(&v)[VEC]) {
    A x[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) x[j] = to_acc(v[j]);
    atomic_add_vec<A, VEC>(work + out, x);
  });
}

__global__ void __launch_bounds__(kThreads)
    count_kernel(const int64_t* __restrict__ index, IndexStrides s, Shape sh, int64_t count_b,
                 int64_t count_k, int64_t* __restrict__ count) {
  for_each_position(count_b, sh.E, count_k, [&](int64_t b, int64_t e, int64_t k, int64_t, int64_t) {
    const int64_t n = index_at(index, s, b, e, k);
    if (n < 0 || n >= sh.N) return;
    atomicAdd(reinterpret_cast<unsigned long long*>(count + (b * sh.N + n) * count_k + k), 1ull);
  });
}

// Order-preserving maps to unsigned 32-bit: a < b exactly when ordered(a) < ordered(b).
__device__ __forceinline__ unsigned int ordered(float v) {
  const unsigned int u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float unordered(unsigned int o, float) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}
__device__ __forceinline__ unsigned int ordered(int v) {
  return static_cast<unsigned int>(v) ^ 0x80000000u;
}
__device__ __forceinline__ int unordered(unsigned int o, int) {
  return static_cast<int>(o ^ 0x80000000u);
}

// Keys of the atomic max/min. Key = unsigned int: the value's order-preserving bits alone
// (values only; the keys live in the float output itself). Key = unsigned long long: value
// bits above position bits, whose low 32 bits are larger for earlier positions under max
// (smaller under min) and reach the extreme for out's own value, which so wins ties.
// kEmpty: the key of an element nothing reached (with 32-bit keys, also a NaN's key).
template <Reduce R, typename Key>
struct Keys;

template <Reduce R>
struct Keys<R, unsigned int> {
  static constexpr unsigned int kEmpty = R == Reduce::kMax ? 0u : 0xffffffffu;
  __device__ static unsigned int of(unsigned int bits, int64_t) { return bits; }
  __device__ static unsigned int initial(unsigned int bits) { return bits; }
  __device__ static unsigned int value_bits(unsigned int key) { return key; }
  __device__ static int64_t position(unsigned int, int64_t E) { return E; }
};

template <Reduce R>
struct Keys<R, unsigned long long> {
  static constexpr unsigned long long kEmpty = R == Reduce::kMax ? 0ull : ~0ull;
  static constexpr unsigned int kInitLow = R == Reduce::kMax ? 0xffffffffu : 0u;
  __device__ static unsigned long long of(unsigned int bits, int64_t e) {
    const unsigned int low = R == Reduce::kMax ? 0xfffffffeu - static_cast<unsigned int>(e)
                                               : static_cast<unsigned int>(e) + 1u;
    return (static_cast<unsigned long long>(bits) << 32) | low;
  }
  __device__ static unsigned long long initial(unsigned int bits) {
    return (static_cast<unsigned long long>(bits) << 32) | kInitLow;
  }
  __device__ static unsigned int value_bits(unsigned long long key) {
    return static_cast<unsigned int>(key >> 32);
  }
  __device__ static int64_t position(unsigned long long key, int64_t E) {
    const unsigned int low = static_cast<unsigned int>(key);
    if (low == kInitLow) return E;
    return R == Reduce::kMax ? int64_t(0xfffffffeu - low) : int64_t(low) - 1;
  }
};

// keys may alias work (32-bit keys): each thread reads its element before writing it.
template <typename A, Reduce R, typename Key>
__global__ void __launch_bounds__(kThreads)
    extreme_init_kernel(int64_t total, const A* work, bool has_init, Key* keys) {
  for_each_index(total, [&](int64_t i) {
    keys[i] = has_init ? Keys<R, Key>::initial(ordered(work[i])) : Keys<R, Key>::kEmpty;
  });
}

template <typename T, Reduce R, bool VECTOR, typename Key>
__global__ void __launch_bounds__(kThreads)
    extreme_atomic_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                          IndexStrides s, Shape sh, Key* __restrict__ keys) {
  constexpr int VEC = vec_width<T, VECTOR>();
  for_each_in_range<T, VEC, false>(src, index, s, sh, nullptr, [&](int64_t e, int64_t out, const T(&v)[VEC]) {
    Key* dst = keys + out;
    // A plain read first: once a group's extreme is in place most candidates lose, and a
    // read is cheaper than an atomic. A stale value only lets a candidate through.
    Key current[VEC];
    load_keys<VEC>(dst, current);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const Key key = Keys<R, Key>::of(ordered(to_acc(v[j])), e);
      if (!better<R>(key, current[j])) continue;
      if constexpr (R == Reduce::kMax) {
        atomicMax(dst + j, key);
      } else {
        atomicMin(dst + j, key);
      }
    }
  });
}

template <typename A, Reduce R, typename Key>
__global__ void __launch_bounds__(kThreads)
    extreme_final_kernel(int64_t total, int64_t E, const Key* keys, bool has_init, A* work,
                         int64_t* __restrict__ arg) {
  for_each_index(total, [&](int64_t i) {
    const Key key = keys[i];
    const bool empty = !has_init && key == Keys<R, Key>::kEmpty;
    work[i] = empty ? A(0) : unordered(Keys<R, Key>::value_bits(key), A(0));
    if (arg) arg[i] = empty ? E : Keys<R, Key>::position(key, E);
  });
}

__global__ void __launch_bounds__(kThreads)
    check_kernel(const int64_t* __restrict__ index, IndexStrides s, Shape sh, int64_t count_b,
                 int64_t count_k, bool check_sorted, IndexError* error) {
  for_each_position(count_b, sh.E, count_k, [&](int64_t b, int64_t e, int64_t k, int64_t, int64_t i) {
    const int64_t n = index_at(index, s, b, e, k);
    if (n < 0 || n >= sh.N) {
      record(error, IndexErrorKind::kOutOfRange, n, i, sh.N);
    } else if (check_sorted && e > 0 && index_at(index, s, b, e - 1, k) > n) {
      record(error, IndexErrorKind::kNotSorted, n, i, sh.N);
    }
  });
}

unsigned int blocks(int64_t work_items) {
  return ops_common::grid_size(work_items, kThreads, kMaxBlocks);
}

template <typename F>
void with_vector(bool vectorize, F&& f) {
  if (vectorize) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

}  // namespace

#if !defined(__CUDACC_RTC__)  // host code: nvcc only, NVRTC compiles the kernels alone
template <typename T>
cudaError_t segment_reduce(Reduce reduce, const T* src, const int64_t* index,
                           IndexStrides strides, const int64_t* perm, Shape shape, void* work,
                           bool has_init, int64_t* arg, int64_t* count, int64_t count_b,
                           int64_t count_k, bool vectorize, IndexError* error,
                           int64_t* rowptr, cudaStream_t stream) {
  using A = acc_t<T>;
  if (rowptr) {
    const cudaError_t err =
        ops_common::launch(rowptr_kernel, blocks(shape.B * (shape.E + 1)), kThreads, 0, stream,
                           index, strides, shape, rowptr, error);
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = cudaSuccess;
  with_reduce(reduce, [&](auto r) {
    constexpr Reduce R = decltype(r)::value;
    with_vector(vectorize, [&](auto vector) {
      constexpr bool VECTOR = decltype(vector)::value;
      err = ops_common::launch(segment_kernel<T, R, VECTOR>,
                               blocks(shape.B * shape.N * shape.K / vec_width<T, VECTOR>()),
                               kThreads, 0, stream, src, index, strides, perm, shape,
                               static_cast<A*>(work), has_init, arg, count, count_b, count_k,
                               error, rowptr);
    });
  });
  return err;
}

template <typename T>
cudaError_t atomic_sum(const T* src, const int64_t* index, IndexStrides strides, Shape shape,
                       void* work, bool vectorize, IndexError* error, cudaStream_t stream) {
  using A = acc_t<T>;
  const bool fused = error != nullptr && shape.B * shape.E * shape.K <= kFusedCheckElements;
  if (error != nullptr && !fused) {
    const cudaError_t err = check_index(index, strides, shape, strides.b == 0 ? 1 : shape.B,
                                        strides.k == 0 ? 1 : shape.K, false, error, stream);
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = cudaSuccess;
  with_vector(vectorize, [&](auto vector) {
    constexpr bool VECTOR = decltype(vector)::value;
    const unsigned grid = blocks(shape.B * shape.E * shape.K / vec_width<T, VECTOR>());
    err = fused ? ops_common::launch(atomic_sum_kernel<T, VECTOR, true>, grid, kThreads, 0, stream,
                                     src, index, strides, shape, static_cast<A*>(work), error)
                : ops_common::launch(atomic_sum_kernel<T, VECTOR, false>, grid, kThreads, 0,
                                     stream, src, index, strides, shape, static_cast<A*>(work),
                                     nullptr);
  });
  return err;
}

cudaError_t atomic_count(const int64_t* index, IndexStrides strides, Shape shape, int64_t count_b,
                         int64_t count_k, int64_t* count, cudaStream_t stream) {
  return ops_common::launch(count_kernel, blocks(count_b * shape.E * count_k), kThreads, 0, stream,
                            index, strides, shape, count_b, count_k, count);
}

template <typename T>
cudaError_t packed_extreme(Reduce reduce, const T* src, const int64_t* index,
                           IndexStrides strides, Shape shape, void* work, bool has_init,
                           int64_t* arg, unsigned long long* keys, bool vectorize,
                           cudaStream_t stream) {
  using A = acc_t<T>;
  const int64_t outputs = shape.B * shape.N * shape.K;
  // init, atomic pass, final; each launched only when the one before it launched.
  auto launch_passes = [&](auto r, auto vector, auto* key_ptr) -> cudaError_t {
    constexpr Reduce R = decltype(r)::value;
    constexpr bool VECTOR = decltype(vector)::value;
    using Key = std::remove_pointer_t<decltype(key_ptr)>;
    A* w = static_cast<A*>(work);
    cudaError_t err = ops_common::launch(extreme_init_kernel<A, R, Key>, blocks(outputs),
                                         kThreads, 0, stream, outputs, w, has_init, key_ptr);
    if (err != cudaSuccess) return err;
    err = ops_common::launch(extreme_atomic_kernel<T, R, VECTOR, Key>,
                             blocks(shape.B * shape.E * shape.K / vec_width<T, VECTOR>()),
                             kThreads, 0, stream, src, index, strides, shape, key_ptr);
    if (err != cudaSuccess) return err;
    return ops_common::launch(extreme_final_kernel<A, R, Key>, blocks(outputs), kThreads, 0,
                              stream, outputs, shape.E, key_ptr, has_init, w, arg);
  };
  cudaError_t err = cudaSuccess;
  auto run = [&](auto r) {
    with_vector(vectorize, [&](auto vector) {
      if constexpr (std::is_same_v<A, float>) {
        if (arg == nullptr) {  // values only: 32-bit keys in work itself
          err = launch_passes(r, vector, static_cast<unsigned int*>(work));
          return;
        }
      }
      err = launch_passes(r, vector, keys);
    });
  };
  if (reduce == Reduce::kMax) {
    run(std::integral_constant<Reduce, Reduce::kMax>{});
  } else {
    run(std::integral_constant<Reduce, Reduce::kMin>{});
  }
  return err;
}

cudaError_t check_index(const int64_t* index, IndexStrides strides, Shape shape, int64_t count_b,
                        int64_t count_k, bool check_sorted, IndexError* error,
                        cudaStream_t stream) {
  return ops_common::launch(check_kernel, blocks(count_b * shape.E * count_k), kThreads, 0, stream,
                            index, strides, shape, count_b, count_k, check_sorted, error);
}

#define SCATTER_INSTANTIATE(T)                                                                 \
  template cudaError_t segment_reduce<T>(Reduce, const T*, const int64_t*, IndexStrides,       \
                                         const int64_t*, Shape, void*, bool, int64_t*,         \
                                         int64_t*, int64_t, int64_t, bool, IndexError*,       \
                                         int64_t*, cudaStream_t);                              \
  template cudaError_t atomic_sum<T>(const T*, const int64_t*, IndexStrides, Shape, void*,     \
                                     bool, IndexError*, cudaStream_t);
SCATTER_INSTANTIATE(float)
SCATTER_INSTANTIATE(double)
SCATTER_INSTANTIATE(ops_common::half_t)
SCATTER_INSTANTIATE(ops_common::bfloat16_t)
SCATTER_INSTANTIATE(int)
SCATTER_INSTANTIATE(int64_t)
#undef SCATTER_INSTANTIATE

#define SCATTER_INSTANTIATE_PACKED(T)                                                          \
  template cudaError_t packed_extreme<T>(Reduce, const T*, const int64_t*, IndexStrides,       \
                                         Shape, void*, bool, int64_t*, unsigned long long*,    \
                                         bool, cudaStream_t);
SCATTER_INSTANTIATE_PACKED(float)
SCATTER_INSTANTIATE_PACKED(ops_common::half_t)
SCATTER_INSTANTIATE_PACKED(ops_common::bfloat16_t)
SCATTER_INSTANTIATE_PACKED(int)
#undef SCATTER_INSTANTIATE_PACKED
#endif  // !defined(__CUDACC_RTC__)

}  // namespace scatter
