// CUDA host side of scatter: picks a kernel route per call, dtype dispatch, device guard,
// current stream, and the bounds check that needs no host sync.
//
// Routes (kernels in scatter_cuda.cu):
//   index known sorted along dim  -> segment reduction (no atomics, deterministic); the
//                                    segment bounds come from one pass over the index
//                                    (rowptr) where the index is one per row
//   sum/mean, any order           -> atomics; with deterministic=True (or torch's
//                                    deterministic mode) a stable sort of the index, then
//                                    the segment reduction through the permutation
//   max/min, any order            -> values only (scatter(), nothing needs arg): one 32-bit
//                                    atomic per element on order-preserving keys (float,
//                                    half, bfloat16), each skipped when a plain read of
//                                    the current key shows it cannot win; with arg:
//                                    packed 64-bit atomics (likewise; float,
//                                    half, bfloat16, int32); else sort + segment (double,
//                                    int64). All deterministic.
// "Known sorted" means index_sorted=True, or detected while inferring dim_size (that
// call syncs anyway). A given dim_size with index_sorted=None does not detect: that would
// need a host sync per call.
//
// Bounds check with a given dim_size: the segment route checks on the way (entries out of
// range fall outside every segment; a broken sortedness promise shows as a misplaced
// entry), and so does the atomic sum of a small problem (an entry out of range is skipped
// and recorded), which is then two launches (zero fill, scatter) as torch's scatter_add_ is;
// the other routes run a check kernel first. Either records a bad index
// into host-mapped memory; the host reads it without a sync at the start of the next
// scatter call on that device (or in scatter::check_errors, which syncs) and raises there.
// Every kernel skips out-of-range entries, so a bad index never writes out of bounds.
#include <ATen/ATen.h>
#include <ATen/Dispatch_v2.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "common/checks.h"
#include "common/cuda_host.h"
#include "scatter_types.h"
#include "scatter_cuda.h"
#include "scatter_host.h"

namespace scatter {
namespace {

using ops_common::cuda_ptr;
using ops_common::cuda_t;

constexpr int kMaxDevices = 64;

// One error record per device, in pinned host memory that kernels write directly (UVA).
IndexError* error_record(c10::DeviceIndex device) {
  static IndexError* records = [] {
    void* p = nullptr;
    C10_CUDA_CHECK(cudaHostAlloc(&p, sizeof(IndexError) * kMaxDevices,
                                 cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, sizeof(IndexError) * kMaxDevices);
    return static_cast<IndexError*>(p);
  }();
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "scatter: CUDA device index ", int(device),
              " past the ", kMaxDevices, " devices supported");
  return records + device;
}

void raise_pending_error(c10::DeviceIndex device) {
  IndexError* r = error_record(device);
  if (*reinterpret_cast<volatile int*>(&r->flag) == 0) return;
  const IndexError seen = *r;
  *reinterpret_cast<volatile int*>(&r->kind) = 0;
  *reinterpret_cast<volatile int*>(&r->flag) = 0;
  if (seen.kind == static_cast<int>(IndexErrorKind::kNotSorted)) {
    TORCH_CHECK(false, "scatter: index_sorted=True, but the index of an earlier call on cuda:",
                int(device), " was not sorted (non-decreasing) along dim: found ", seen.value,
                " after a larger index at flat position ", seen.position,
                " of the index viewed as [before dim, dim, after dim]; that result is wrong. "
                "(CUDA checks a given dim_size without a host sync; errors surface at the next "
                "scatter call or at check_errors().)");
  }
  TORCH_CHECK(false, "scatter: index out of range in an earlier call on cuda:", int(device),
              ": found ", seen.value, ", but indices must be in [0, ", seen.dim_size,
              ") (dim_size ", seen.dim_size, "), at flat position ", seen.position,
              " of the index viewed as [before dim, dim, after dim]; that result skipped it. "
              "(CUDA checks a given dim_size without a host sync; errors surface at the next "
              "scatter call or at check_errors().)");
}

void launch_check(const Problem& p, IndexError* error) {
  OPS_CHECK_LAUNCH(check_index(p.index.const_data_ptr<int64_t>(), p.strides, p.shape, p.count_b,
                               p.count_k, p.index_sorted.value_or(false), error,
                               ops_common::current_stream()));
}

// The check runs inside run_cuda (free in the segment route); only a problem with no output
// elements, where nothing runs, is checked here.
void check_index_cuda(const Problem& p) {
  if (p.shape.B * p.shape.N * p.shape.K == 0 && p.index.numel() > 0 && p.shape.E > 0) {
    launch_check(p, error_record(p.index.device().index()));
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

bool packable(const Problem& p) {
  const auto t = p.src.scalar_type();
  return (t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kInt) &&
         p.shape.E <= int64_t(0xfffffffd);
}

template <typename scalar_t>
bool run_typed(const Problem& p, at::Tensor& work, at::Tensor& arg, at::Tensor& count) {
  using T = cuda_t<scalar_t>;
  const cudaStream_t stream = ops_common::current_stream();
  const T* src = cuda_ptr<scalar_t>(p.src);
  const int64_t* index = p.index.const_data_ptr<int64_t>();
  int64_t* arg_ptr = arg.defined() ? arg.mutable_data_ptr<int64_t>() : nullptr;
  int64_t* count_ptr = count.defined() ? count.mutable_data_ptr<int64_t>() : nullptr;
  constexpr int64_t kVec = 16 / sizeof(T);
  const bool vectorize = p.strides.k == 0 && p.shape.K % kVec == 0 && aligned16(src) &&
                         aligned16(work.data_ptr());
  const bool extreme = p.reduce == Reduce::kMax || p.reduce == Reduce::kMin;
  const bool broadcast_dim = p.strides.e == 0;  // one index for the whole dim: sorted
  const bool sorted = p.index_sorted.value_or(false) || broadcast_dim;
  IndexError* error = p.check_in_run ? error_record(p.index.device().index()) : nullptr;

  auto segment = [&](const int64_t* idx, const int64_t* perm) {
    at::Tensor rowptr;  // segment bounds in one pass over the index, where it is one per row
    if (p.strides.k == 0) {
      rowptr = at::empty({p.shape.B, p.shape.N + 1}, p.index.options());
    }
    OPS_CHECK_LAUNCH(segment_reduce<T>(p.reduce, src, idx, p.strides, perm, p.shape,
                                       work.data_ptr(), p.has_out, arg_ptr, count_ptr, p.count_b,
                                       p.count_k, vectorize, error,
                                       rowptr.defined() ? rowptr.mutable_data_ptr<int64_t>() : nullptr,
                                       stream));
    return true;
  };
  if (sorted) return segment(index, nullptr);
  // The atomic sum checks bounds itself (error passed in); the other routes first.
  if (extreme && !packable(p)) {
    if (error) launch_check(p, error);
    auto [keys, perm] = at::sort(index_3d(p), std::optional<bool>(true), /*dim=*/1, /*descending=*/false);
    return segment(keys.const_data_ptr<int64_t>(), perm.const_data_ptr<int64_t>());
  }
  if (extreme) {
    if (error) launch_check(p, error);
    if constexpr (std::is_same_v<scalar_t, double> || std::is_same_v<scalar_t, int64_t>) {
      TORCH_INTERNAL_ASSERT(false, "scatter: packed route for a 64-bit dtype");
    } else {
      // Values only (no arg wanted, float work): 32-bit keys in work itself, no scratch.
      const bool values_only = !p.want_arg && work.scalar_type() == at::kFloat;
      at::Tensor keys = values_only ? at::Tensor()
                                    : at::empty({p.shape.B, p.shape.N, p.shape.K},
                                                p.src.options().dtype(at::kLong));
      OPS_CHECK_LAUNCH(packed_extreme<T>(
          p.reduce, src, index, p.strides, p.shape, work.data_ptr(), p.has_out,
          values_only ? nullptr : arg_ptr,
          values_only ? nullptr
                      : reinterpret_cast<unsigned long long*>(keys.mutable_data_ptr<int64_t>()),
          vectorize, stream));
    }
    return true;
  }
  if (p.deterministic) {
    if (error) launch_check(p, error);
    auto [keys, perm] = at::sort(index_3d(p), std::optional<bool>(true), /*dim=*/1, /*descending=*/false);
    return segment(keys.const_data_ptr<int64_t>(), perm.const_data_ptr<int64_t>());
  }
  if (!p.has_out) work.zero_();
  OPS_CHECK_LAUNCH(atomic_sum<T>(src, index, p.strides, p.shape, work.data_ptr(), vectorize,
                                 error, stream));
  if (count_ptr) {
    count.zero_();
    OPS_CHECK_LAUNCH(atomic_count(index, p.strides, p.shape, p.count_b, p.count_k, count_ptr,
                                  stream));
  }
  return false;
}

bool run_cuda(const Problem& p, at::Tensor& work, at::Tensor& arg, at::Tensor& count) {
  bool mean_done = false;
  AT_DISPATCH_V2(p.src.scalar_type(), "scatter_cuda", AT_WRAP([&] {
    mean_done = run_typed<scalar_t>(p, work, arg, count);
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
  return mean_done;
}

const Backend kCudaBackend{&check_index_cuda, &run_cuda, true};

std::tuple<at::Tensor, at::Tensor> reduce_cuda(const at::Tensor& src, const at::Tensor& index,
                                               int64_t dim, std::optional<int64_t> dim_size,
                                               c10::string_view reduce,
                                               std::optional<bool> index_sorted,
                                               bool deterministic, bool check_bounds,
                                               bool compute_arg) {
  OP_CHECK_SAME_DEVICE("scatter", "index", index, "src", src);
  const c10::cuda::CUDAGuard guard(src.device());
  raise_pending_error(src.device().index());
  return reduce_with(kCudaBackend, src, index, dim, dim_size, reduce, index_sorted, deterministic,
                     check_bounds, compute_arg);
}

at::Tensor sum_cuda(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size) {
  OP_CHECK_SAME_DEVICE("scatter", "index", index, "src", src);
  const c10::cuda::CUDAGuard guard(src.device());
  raise_pending_error(src.device().index());
  return sum_with(kCudaBackend, src, index, dim, dim_size);
}

at::Tensor reduce_into_cuda(at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim, c10::string_view reduce,
                            std::optional<bool> index_sorted, bool deterministic,
                            bool check_bounds, bool compute_arg) {
  OP_CHECK_SAME_DEVICE("scatter", "index", index, "src", src);
  OP_CHECK_SAME_DEVICE("scatter", "out", out, "src", src);
  const c10::cuda::CUDAGuard guard(src.device());
  raise_pending_error(src.device().index());
  return reduce_into_with(kCudaBackend, out, src, index, dim, reduce, index_sorted, deterministic,
                          check_bounds, compute_arg);
}

// Waits for the device's work, then raises a recorded index error, if any.
void check_errors_cuda(const at::Tensor& device_of) {
  const c10::cuda::CUDAGuard guard(device_of.device());
  C10_CUDA_CHECK(cudaDeviceSynchronize());
  raise_pending_error(device_of.device().index());
}

}  // namespace
}  // namespace scatter

TORCH_LIBRARY_IMPL(scatter, CUDA, m) {
  m.impl("reduce", &scatter::reduce_cuda);
  m.impl("sum", &scatter::sum_cuda);
  m.impl("reduce_", &scatter::reduce_into_cuda);
  m.impl("check_errors", &scatter::check_errors_cuda);
}
