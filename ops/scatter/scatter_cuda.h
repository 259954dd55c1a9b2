#pragma once
// Torch-free launchers of the CUDA scatter kernels (scatter_cuda.cu), called by the host
// side (scatter_cuda.cpp). T is the CUDA storage type of src (float, double,
// ops_common::half_t, bfloat16_t, int, int64_t); A = ops_common::acc_t<T> is the type of the work buffer
// [B, N, K] that receives the result (float for 16-bit src). Each returns
// cudaGetLastError() after its launches.
#include <cuda_runtime.h>

#include <cstdint>

#include "scatter_types.h"

namespace scatter {

// Segment reduction of an index sorted along e, without atomics: one thread per output
// element (VEC consecutive features where the index is broadcast over K) finds its
// segment by binary search and reduces it in order; every output element is written,
// empty ones included. perm (optional, strides of index) reads src through the stable
// sort permutation of an unsorted index. has_init: work holds out's values, which take
// part. count (mean only, [Bc, N, Kc]) receives the segment lengths. error (optional):
// bounds check, and check of a sortedness promise where perm is null, done on the way.
// rowptr (optional, scratch [B, N + 1], only for an index broadcast over K, strides.k == 0):
// the segment bounds are found once by a pass over the index instead of a binary search
// per output element.
template <typename T>
cudaError_t segment_reduce(Reduce reduce, const T* src, const int64_t* index,
                           IndexStrides strides, const int64_t* perm, Shape shape, void* work,
                           bool has_init, int64_t* arg, int64_t* count, int64_t count_b,
                           int64_t count_k, bool vectorize, IndexError* error,
                           int64_t* rowptr, cudaStream_t stream);

// work[b, index(b, e, k), k] += src[b, e, k] with atomics (vectorised where K allows).
// error (optional): bounds check, as check_index records it (inside the scatter kernel for
// a small problem, else by a check launch before it).
template <typename T>
cudaError_t atomic_sum(const T* src, const int64_t* index, IndexStrides strides, Shape shape,
                       void* work, bool vectorize, IndexError* error, cudaStream_t stream);

// count[bc, index(bc, e, kc), kc] += 1 over the index's own extent [Bc, E, Kc].
cudaError_t atomic_count(const int64_t* index, IndexStrides strides, Shape shape, int64_t count_b,
                         int64_t count_k, int64_t* count, cudaStream_t stream);

// max/min with one 64-bit atomic per element: the value's order-preserving bits above the
// position's, so ties go to the first position. For T whose A is float or int; needs
// E < 2^32 - 2. keys is scratch [B, N, K]; work and arg receive the result. With arg null
// and a float work buffer, values only: 32-bit keys in work itself (keys unused).
// Each atomic is skipped when a plain read of the current key shows that it cannot win.
template <typename T>
cudaError_t packed_extreme(Reduce reduce, const T* src, const int64_t* index,
                           IndexStrides strides, Shape shape, void* work, bool has_init,
                           int64_t* arg, unsigned long long* keys, bool vectorize,
                           cudaStream_t stream);

// Bounds check (and, if check_sorted, sortedness along e) of the index's own extent
// [Bc, E, Kc] against dim_size N; the first failure goes to *error (host-mapped).
cudaError_t check_index(const int64_t* index, IndexStrides strides, Shape shape, int64_t count_b,
                        int64_t count_k, bool check_sorted, IndexError* error,
                        cudaStream_t stream);

}  // namespace scatter
