// CUDA kernels of the scatter reductions; torch-free (CUDA headers and the op's own only).
// The host side (scatter_cuda.cpp) picks the route:
//   segment_tile_kernel    index sorted along dim (or read through a stable sort permutation,
//                          the deterministic route) and one per row (strides.k == 0, the PyG
//                          case): a block takes a tile of output rows, finds the tile's slice
//                          of the index with two warp searches, reads the slice once for the
//                          rows' segment starts (checking bounds and sortedness on the way),
//                          then reduces each segment in order. One pass, no atomics.
//   segment_search_kernel  sorted index that varies along K: each output element finds its
//                          segment by binary search and reduces it in order.
//   atomic_sum_kernel      sum/mean in any order: one atomic add per element, 16 bytes at a
//                          time on sm_90 (float4 atomics).
//   extreme_*_kernel       max/min in any order: one atomicMax/atomicMin per element on
//                          order-preserving keys, skipped when a plain read of the key shows it
//                          cannot win. 32-bit keys (values only) live in the float output
//                          itself; 64-bit keys put the value bits above position bits, so one
//                          atomic yields value and arg (ties to the first position).
// Every segment kernel reduces through the same SegmentAcc/accumulate/store_segment helpers,
// every atomic kernel visits src through for_each_in_range.
// Out-of-range indices are skipped by every kernel, checked or not: never a wild write.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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
template <int VEC>
__device__ __forceinline__ void load_keys(const unsigned int* p, unsigned int (&out)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) {
      const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p) + q);
      out[4 * q] = u.x;
      out[4 * q + 1] = u.y;
      out[4 * q + 2] = u.z;
      out[4 * q + 3] = u.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = __ldcg(p + j);
  }
}
template <int VEC>
__device__ __forceinline__ void load_keys(const unsigned long long* p,
                                          unsigned long long (&out)[VEC]) {
  if constexpr (VEC % 2 == 0) {
#pragma unroll
    for (int q = 0; q < VEC / 2; ++q) {
      const ulonglong2 u = __ldcg(reinterpret_cast<const ulonglong2*>(p) + q);
      out[2 * q] = u.x;
      out[2 * q + 1] = u.y;
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

// Adds positions first, first + step, ... below end: rows of src_row (K elements apart), read
// through perm (perm_e apart) where given. visit(p) sees each position first (a check that
// reads the index); it must have no side effects, so the loads of several iterations stay
// in flight together.
template <bool STREAM, int UNROLL, typename T, Reduce R, int VEC, typename Visit>
__device__ __forceinline__ void accumulate(SegmentAcc<T, R, VEC>& acc, const T* src_row, int64_t K,
                                           const int64_t* perm, int64_t perm_e, int64_t first,
                                           int64_t end, int64_t step, Visit&& visit) {
  // A counted loop (not p += step up to end): its trip count is known, so it unrolls.
  const int64_t steps = first < end ? (end - first + step - 1) / step : 0;
#pragma unroll UNROLL
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t p = first + i * step;
    const int64_t e = perm ? perm[p * perm_e] : p;
    visit(p);
    T v[VEC];
    load_row<STREAM>(src_row + e * K, v);
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

// lower_bound (scatter.h) by a whole warp: 32 probes per step cut the range 33 ways, so about
// log33(E) dependent loads instead of log2(E). The same answer on a sorted index; on any
// index a position r with index[r - 1] < value (r > 0) and index[r] >= value (r < E), which
// the bounds check relies on. All 32 lanes must call it; all get the answer.
__device__ int64_t warp_lower_bound(const int64_t* index, const IndexStrides& s, int64_t b,
                                    int64_t E, int64_t value) {
  const int lane = threadIdx.x % 32;
  int64_t lo = 0, hi = E;
  while (lo < hi) {
    const int64_t len = hi - lo;
    const int64_t p = lo + len * (lane + 1) / 33;
    const bool below = index_at(index, s, b, p, 0) < value;
    const unsigned int mask = __ballot_sync(0xffffffffu, below);
    const int c = mask == 0xffffffffu ? 32 : __ffs(~mask) - 1;  // leading probes below value
    const int64_t lo_next = c > 0 ? lo + len * c / 33 + 1 : lo;
    hi = c < 32 ? lo + len * (c + 1) / 33 : hi;
    lo = lo_next;
  }
  return lo;
}

// How segment_tile_kernel cuts the output [B, N, K / VEC]: `rows` output rows per tile,
// each row served by row_threads * split threads; split > 1 (sum/mean) lets `split` thread
// groups take alternate positions of one row, combined in a fixed order at the end. Rows
// wider than the block take kv_tiles tiles.
struct Tile {
  int row_threads;
  int split;
  int rows;
  int64_t row_tiles;
  int64_t kv_tiles;
};

template <typename T, Reduce R, bool VECTOR, bool STREAM, int UNROLL>
__global__ void __launch_bounds__(kThreads)
    segment_tile_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                        IndexStrides s, const int64_t* __restrict__ perm, Shape sh, Tile tile,
                        acc_t<T>* __restrict__ work, bool has_init, int64_t* __restrict__ arg,
                        int64_t* __restrict__ count, int64_t count_b, IndexError* error) {
  using A = acc_t<T>;
  constexpr int VEC = vec_width<T, VECTOR>();
  constexpr int64_t kUnseen = INT64_MAX;
  __shared__ int64_t row_start[kThreads + 1];  // first position of row n0 + i, if seen
  __shared__ int64_t slice[2];                 // the tile's positions [slice[0], slice[1])
  const int group = tile.row_threads * tile.split;
  const int local_row = threadIdx.x / group;
  const int part = (threadIdx.x % group) / tile.row_threads;
  const int64_t tiles = sh.B * tile.row_tiles * tile.kv_tiles;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    int64_t kt, br, rt, b;
    divmod(t, tile.kv_tiles, br, kt);
    divmod(br, tile.row_tiles, b, rt);
    const int64_t n0 = rt * tile.rows;
    const int64_t n1 = min(n0 + tile.rows, sh.N);
    const int warp = threadIdx.x / 32;
    if (warp < 2) {
      const int64_t r = warp_lower_bound(index, s, b, sh.E, warp == 0 ? n0 : n1);
      if (threadIdx.x % 32 == 0) slice[warp] = r;
    }
    for (int i = threadIdx.x; i <= tile.rows; i += blockDim.x) row_start[i] = kUnseen;
    __syncthreads();
    const int64_t first = slice[0], last = slice[1];
    // The checks, once per index element: tiles cover [lower_bound(0), lower_bound(N))
    // exactly, each pair of neighbours in it is compared, and any entry outside it is out of
    // range (the search's guarantee), found by the first and last tile.
    const bool verify = error && !perm && kt == 0 && (count_b > 1 || b == 0);
    for (int64_t p = first + threadIdx.x; p < last; p += blockDim.x) {
      const int64_t v = index_at(index, s, b, p, 0);
      const int64_t prev = p > 0 ? index_at(index, s, b, p - 1, 0) : int64_t(-1);
      if (verify) {
        if (v < 0 || v >= sh.N) {
          record(error, IndexErrorKind::kOutOfRange, v, b * sh.E + p, sh.N);
        } else if (prev > v) {
          record(error, IndexErrorKind::kNotSorted, v, b * sh.E + p, sh.N);
        }
      }
      // p starts the rows (prev, v]; on a sorted index each row of the tile once.
      const int64_t lo = max(min(prev, n1) + 1, n0 + 1), hi = min(v, n1 - 1);
      for (int64_t n = lo; n <= hi; ++n) row_start[n - n0] = p;
    }
    if (verify && threadIdx.x == 0) {
      if (n0 == 0 && first > 0) {
        record(error, IndexErrorKind::kOutOfRange, index_at(index, s, b, first - 1, 0),
               b * sh.E + first - 1, sh.N);
      }
      if (n1 == sh.N && last < sh.E) {
        record(error, IndexErrorKind::kOutOfRange, index_at(index, s, b, last, 0),
               b * sh.E + last, sh.N);
      }
    }
    __syncthreads();
    const int64_t n = n0 + local_row;
    const int64_t k0 = (kt * tile.row_threads + threadIdx.x % tile.row_threads) * VEC;
    // Uniform over each warp where split > 1 (a row then fills whole warps).
    if (local_row < tile.rows && n < n1 && k0 < sh.K) {
      // Clamped: a broken sortedness promise leaves rows wrong (and recorded), never a
      // read outside the slice.
      const int64_t start = local_row == 0 ? first : min(row_start[local_row], last);
      const int64_t end = max(start, n + 1 == n1 ? last : min(row_start[local_row + 1], last));
      A* w = work + (b * sh.N + n) * sh.K + k0;
      SegmentAcc<T, R, VEC> acc(has_init && part == 0 ? w : nullptr, sh.E);
      accumulate<STREAM, UNROLL>(acc, src + b * sh.E * sh.K + k0, sh.K, perm ? perm + b * s.b : nullptr,
                         s.e, start + part, end, tile.split, [](int64_t) {});
      if constexpr (!SegmentAcc<T, R, VEC>::kExtreme) {
        for (int offset = group / 2; offset >= tile.row_threads; offset /= 2) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            acc.value[j] += __shfl_down_sync(0xffffffffu, acc.value[j], offset);
          }
        }
      }
      if (part == 0) {
        if constexpr (R == Reduce::kMean) {
          // count is [Bc, N, 1] here; the threads of b = 0 write it where it is broadcast.
          if ((count_b > 1 || b == 0) && k0 == 0) count[(count_b > 1 ? b : 0) * sh.N + n] = end - start;
        }
        store_segment(acc, end - start, w, arg ? arg + (b * sh.N + n) * sh.K + k0 : nullptr);
      }
    }
    __syncthreads();  // row_start and slice serve the next tile
  }
}

template <typename T, Reduce R, bool VECTOR>
__global__ void __launch_bounds__(kThreads)
    segment_search_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                          IndexStrides s, const int64_t* __restrict__ perm, Shape sh,
                          acc_t<T>* __restrict__ work, bool has_init, int64_t* __restrict__ arg,
                          int64_t* __restrict__ count, int64_t count_b, int64_t count_k,
                          IndexError* error, const int64_t* __restrict__ rowptr) {
  using A = acc_t<T>;
  constexpr int VEC = vec_width<T, VECTOR>();
  const int64_t kv_count = sh.K / VEC;
  const int64_t total = sh.B * sh.N * kv_count;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t k0, bn, n, b;
    divmod(i, kv_count, bn, k0);
    k0 *= VEC;
    divmod(bn, sh.N, b, n);
    int64_t start, end;
    if (rowptr) {
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
    accumulate<false, 4>(acc, src + b * sh.E * sh.K + k0, sh.K,
                      perm ? perm + b * s.b + k0 * s.k : nullptr, s.e, start, end, 1,
                      [&](int64_t p) {
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
  }
}

// Segment starts of an index sorted along e and broadcast over K: rowptr[b, n] is the first
// position whose index is >= n (rowptr[b, N] = E). With error set it checks bounds and
// sortedness on the way. (The two-pass route, kept for comparison.)
__global__ void __launch_bounds__(kThreads)
    rowptr_kernel(const int64_t* __restrict__ index, IndexStrides s, Shape sh,
                  int64_t* __restrict__ rowptr, IndexError* error) {
  const int64_t total = sh.B * (sh.E + 1);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
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
  }
}

// ------------------------------------------------------------------ atomic reductions

// Calls f(e, out, v) for every VEC features v of src whose index is in range, out being
// their offset in the [B, N, K] output; grid-stride. One thread per (b, e) row of VEC
// features where the index is broadcast over K (one index load, one 16-byte src load),
// else per element.
template <typename T, int VEC, typename F>
__device__ __forceinline__ void for_each_in_range(const T* __restrict__ src,
                                                  const int64_t* __restrict__ index,
                                                  const IndexStrides& s, const Shape& sh, F&& f) {
  const int64_t kv_count = sh.K / VEC;
  const int64_t total = sh.B * sh.E * kv_count;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t k0, be, e, b;
    divmod(i, kv_count, be, k0);
    k0 *= VEC;
    divmod(be, sh.E, b, e);
    const int64_t n = index_at(index, s, b, e, k0);
    if (n < 0 || n >= sh.N) continue;
    T v[VEC];
    load_row<false>(src + be * sh.K + k0, v);
    f(e, (b * sh.N + n) * sh.K + k0, v);
  }
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

template <typename T, bool VECTOR>
__global__ void __launch_bounds__(kThreads)
    atomic_sum_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                      IndexStrides s, Shape sh, acc_t<T>* __restrict__ work) {
  using A = acc_t<T>;
  constexpr int VEC = vec_width<T, VECTOR>();
  for_each_in_range<T, VEC>(src, index, s, sh, [&](int64_t, int64_t out, const T(&v)[VEC]) {
    A x[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) x[j] = to_acc(v[j]);
    atomic_add_vec<A, VEC>(work + out, x);
  });
}

__global__ void __launch_bounds__(kThreads)
    count_kernel(const int64_t* __restrict__ index, IndexStrides s, Shape sh, int64_t count_b,
                 int64_t count_k, int64_t* __restrict__ count) {
  const int64_t total = count_b * sh.E * count_k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t k, be, e, b;
    divmod(i, count_k, be, k);
    divmod(be, sh.E, b, e);
    const int64_t n = index_at(index, s, b, e, k);
    if (n < 0 || n >= sh.N) continue;
    atomicAdd(reinterpret_cast<unsigned long long*>(count + (b * sh.N + n) * count_k + k), 1ull);
  }
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
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    keys[i] = has_init ? Keys<R, Key>::initial(ordered(work[i])) : Keys<R, Key>::kEmpty;
  }
}

template <typename T, Reduce R, bool VECTOR, typename Key>
__global__ void __launch_bounds__(kThreads)
    extreme_atomic_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                          IndexStrides s, Shape sh, Key* __restrict__ keys) {
  constexpr int VEC = vec_width<T, VECTOR>();
  for_each_in_range<T, VEC>(src, index, s, sh, [&](int64_t e, int64_t out, const T(&v)[VEC]) {
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
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Key key = keys[i];
    const bool empty = !has_init && key == Keys<R, Key>::kEmpty;
    work[i] = empty ? A(0) : unordered(Keys<R, Key>::value_bits(key), A(0));
    if (arg) arg[i] = empty ? E : Keys<R, Key>::position(key, E);
  }
}

__global__ void __launch_bounds__(kThreads)
    check_kernel(const int64_t* __restrict__ index, IndexStrides s, Shape sh, int64_t count_b,
                 int64_t count_k, bool check_sorted, IndexError* error) {
  const int64_t total = count_b * sh.E * count_k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t k, be, e, b;
    divmod(i, count_k, be, k);
    divmod(be, sh.E, b, e);
    const int64_t n = index_at(index, s, b, e, k);
    if (n < 0 || n >= sh.N) {
      record(error, IndexErrorKind::kOutOfRange, n, i, sh.N);
    } else if (check_sorted && e > 0 && index_at(index, s, b, e - 1, k) > n) {
      record(error, IndexErrorKind::kNotSorted, n, i, sh.N);
    }
  }
}

unsigned int blocks(int64_t work_items) {
  return ops_common::grid_size(work_items, kThreads, kMaxBlocks);
}

template <typename F>
void with_reduce(Reduce reduce, F&& f) {
  switch (reduce) {
    case Reduce::kSum: f(std::integral_constant<Reduce, Reduce::kSum>{}); break;
    case Reduce::kMean: f(std::integral_constant<Reduce, Reduce::kMean>{}); break;
    case Reduce::kMax: f(std::integral_constant<Reduce, Reduce::kMax>{}); break;
    case Reduce::kMin: f(std::integral_constant<Reduce, Reduce::kMin>{}); break;
  }
}

template <typename F>
void with_vector(bool vectorize, F&& f) {
  if (vectorize) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// The tile of segment_tile_kernel for rows of kv_count threads (one per VEC features).
Tile make_tile(int64_t kv_count, int64_t N, bool split) {
  Tile tile{};
  if (kv_count >= kThreads) {
    tile.row_threads = kThreads;
    tile.split = 1;
    tile.kv_tiles = ops_common::ceil_div(kv_count, kThreads);
  } else {
    tile.row_threads = static_cast<int>(kv_count);
    tile.split = split && 32 % tile.row_threads == 0 && tile.row_threads < 32 ? 32 / tile.row_threads : 1;
    tile.kv_tiles = 1;
  }
  tile.rows = kThreads / (tile.row_threads * tile.split);
  tile.row_tiles = ops_common::ceil_div(N, tile.rows);
  return tile;
}

}  // namespace

template <typename T>
cudaError_t segment_reduce(Reduce reduce, const T* src, const int64_t* index,
                           IndexStrides strides, const int64_t* perm, Shape shape, void* work,
                           bool has_init, int64_t* arg, int64_t* count, int64_t count_b,
                           int64_t count_k, bool vectorize, IndexError* error,
                           int64_t* rowptr, int variant, cudaStream_t stream) {
  using A = acc_t<T>;
  if (rowptr) {
    rowptr_kernel<<<blocks(shape.B * (shape.E + 1)), kThreads, 0, stream>>>(index, strides, shape,
                                                                            rowptr, error);
  }
  with_reduce(reduce, [&](auto r) {
    constexpr Reduce R = decltype(r)::value;
    with_vector(vectorize, [&](auto vector) {
      constexpr bool VECTOR = decltype(vector)::value;
      constexpr int VEC = vec_width<T, VECTOR>();
      if (strides.k == 0 && rowptr == nullptr) {
        const bool split = (variant & 2) && (R == Reduce::kSum || R == Reduce::kMean);
        const Tile tile = make_tile(shape.K / VEC, shape.N, split);
        const int64_t tiles = shape.B * tile.row_tiles * tile.kv_tiles;
        const unsigned int grid = static_cast<unsigned int>(std::min(tiles, kMaxBlocks));
        auto launch = [&](auto stream_loads, auto unroll) {
          segment_tile_kernel<T, R, VECTOR, decltype(stream_loads)::value, decltype(unroll)::value>
              <<<grid, kThreads, 0, stream>>>(src, index, strides, perm, shape, tile,
                                              static_cast<A*>(work), has_init, arg, count,
                                              count_b, error);
        };
        using U4 = std::integral_constant<int, 4>;
        using U8 = std::integral_constant<int, 8>;
        if constexpr (std::is_same_v<T, float> && VECTOR) {
          switch (variant & 5) {
            case 1: launch(std::true_type{}, U4{}); return;
            case 4: launch(std::false_type{}, U8{}); return;
            case 5: launch(std::true_type{}, U8{}); return;
            default: break;
          }
        }
        launch(std::false_type{}, U4{});
        return;
      }
      segment_search_kernel<T, R, VECTOR>
          <<<blocks(shape.B * shape.N * shape.K / VEC), kThreads, 0, stream>>>(
              src, index, strides, perm, shape, static_cast<A*>(work), has_init, arg, count,
              count_b, count_k, error, rowptr);
    });
  });
  return cudaGetLastError();
}

template <typename T>
cudaError_t atomic_sum(const T* src, const int64_t* index, IndexStrides strides, Shape shape,
                       void* work, bool vectorize, cudaStream_t stream) {
  using A = acc_t<T>;
  with_vector(vectorize, [&](auto vector) {
    constexpr bool VECTOR = decltype(vector)::value;
    atomic_sum_kernel<T, VECTOR>
        <<<blocks(shape.B * shape.E * shape.K / vec_width<T, VECTOR>()), kThreads, 0, stream>>>(
            src, index, strides, shape, static_cast<A*>(work));
  });
  return cudaGetLastError();
}

cudaError_t atomic_count(const int64_t* index, IndexStrides strides, Shape shape, int64_t count_b,
                         int64_t count_k, int64_t* count, cudaStream_t stream) {
  count_kernel<<<blocks(count_b * shape.E * count_k), kThreads, 0, stream>>>(
      index, strides, shape, count_b, count_k, count);
  return cudaGetLastError();
}

template <typename T>
cudaError_t packed_extreme(Reduce reduce, const T* src, const int64_t* index,
                           IndexStrides strides, Shape shape, void* work, bool has_init,
                           int64_t* arg, unsigned long long* keys, bool vectorize,
                           cudaStream_t stream) {
  using A = acc_t<T>;
  const int64_t outputs = shape.B * shape.N * shape.K;
  auto launch = [&](auto r, auto vector, auto* key_ptr) {
    constexpr Reduce R = decltype(r)::value;
    constexpr bool VECTOR = decltype(vector)::value;
    using Key = std::remove_pointer_t<decltype(key_ptr)>;
    A* w = static_cast<A*>(work);
    extreme_init_kernel<A, R, Key><<<blocks(outputs), kThreads, 0, stream>>>(outputs, w, has_init,
                                                                           key_ptr);
    extreme_atomic_kernel<T, R, VECTOR, Key>
        <<<blocks(shape.B * shape.E * shape.K / vec_width<T, VECTOR>()), kThreads, 0, stream>>>(
            src, index, strides, shape, key_ptr);
    extreme_final_kernel<A, R, Key><<<blocks(outputs), kThreads, 0, stream>>>(
        outputs, shape.E, key_ptr, has_init, w, arg);
  };
  auto run = [&](auto r) {
    with_vector(vectorize, [&](auto vector) {
      if constexpr (std::is_same_v<A, float>) {
        if (arg == nullptr) {  // values only: 32-bit keys in work itself
          launch(r, vector, static_cast<unsigned int*>(work));
          return;
        }
      }
      launch(r, vector, keys);
    });
  };
  if (reduce == Reduce::kMax) {
    run(std::integral_constant<Reduce, Reduce::kMax>{});
  } else {
    run(std::integral_constant<Reduce, Reduce::kMin>{});
  }
  return cudaGetLastError();
}

cudaError_t check_index(const int64_t* index, IndexStrides strides, Shape shape, int64_t count_b,
                        int64_t count_k, bool check_sorted, IndexError* error,
                        cudaStream_t stream) {
  check_kernel<<<blocks(count_b * shape.E * count_k), kThreads, 0, stream>>>(
      index, strides, shape, count_b, count_k, check_sorted, error);
  return cudaGetLastError();
}

#define SCATTER_INSTANTIATE(T)                                                                 \
  template cudaError_t segment_reduce<T>(Reduce, const T*, const int64_t*, IndexStrides,       \
                                         const int64_t*, Shape, void*, bool, int64_t*,         \
                                         int64_t*, int64_t, int64_t, bool, IndexError*,       \
                                         int64_t*, int, cudaStream_t);                         \
  template cudaError_t atomic_sum<T>(const T*, const int64_t*, IndexStrides, Shape, void*,     \
                                     bool, cudaStream_t);
SCATTER_INSTANTIATE(float)
SCATTER_INSTANTIATE(double)
SCATTER_INSTANTIATE(__half)
SCATTER_INSTANTIATE(__nv_bfloat16)
SCATTER_INSTANTIATE(int)
SCATTER_INSTANTIATE(int64_t)
#undef SCATTER_INSTANTIATE

#define SCATTER_INSTANTIATE_PACKED(T)                                                          \
  template cudaError_t packed_extreme<T>(Reduce, const T*, const int64_t*, IndexStrides,       \
                                         Shape, void*, bool, int64_t*, unsigned long long*,    \
                                         bool, cudaStream_t);
SCATTER_INSTANTIATE_PACKED(float)
SCATTER_INSTANTIATE_PACKED(__half)
SCATTER_INSTANTIATE_PACKED(__nv_bfloat16)
SCATTER_INSTANTIATE_PACKED(int)
#undef SCATTER_INSTANTIATE_PACKED

}  // namespace scatter
