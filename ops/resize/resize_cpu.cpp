// resize: the CPU kernels (declared in resize_cpu.h). Coordinates come from resize.h,
// shared with the CUDA kernels. The backward gathers: each input pixel sums the output
// pixels that read it (ranges from first_reader/end_reader), in a fixed order, so its
// result does not depend on the number of threads. A unit of its own, so that an edit of
// the schema or the host side compiles no kernel; torch-free (16-bit data is read and
// written as its bits through common/cpu_loops.h), so the loader compiles it as plain C++,
// one object per dtype (OPS_CPU_SLICE_k below).
#include <algorithm>
#include <vector>

#include "common/cpu_loops.h"
#include "resize.h"
#include "resize_cpu.h"

namespace resize_op {
namespace {

// Rows per parallel task: about 32k output elements.
int64_t grain_rows(int64_t row_elements) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, row_elements));
}

}  // namespace

// Storage: how a dtype is read and written (c10::Half and c10::BFloat16 as their bits).
template <typename Storage, typename acc_t, typename bits_t = typename Storage::type>
void forward_kernel(const bits_t* in, bits_t* out, const Geometry& g, const AxisMap<acc_t>& hmap,
                    const AxisMap<acc_t>& wmap) {
  std::vector<Taps<acc_t>> th(g.out_h), tw(g.out_w);
  for (int y = 0; y < g.out_h; ++y) th[y] = taps(hmap, y);
  for (int x = 0; x < g.out_w; ++x) tw[x] = taps(wmap, x);
  const int64_t C = g.channels;
  const int64_t in_row = g.in_w * C, in_plane = g.in_h * in_row;
  const int64_t out_row = g.out_w * C, out_plane = g.out_h * out_row;
  ops_common::parallel_for(0, g.planes * g.out_h, grain_rows(out_row), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / g.out_h;
      const Taps<acc_t>& ty = th[r % g.out_h];
      const bits_t* top = in + p * in_plane + ty.i0 * in_row;
      const bits_t* bottom = in + p * in_plane + ty.i1 * in_row;
      bits_t* o = out + p * out_plane + (r % g.out_h) * out_row;
      const acc_t wy0 = acc_t(1) - ty.l1, wy1 = ty.l1;
      for (int x = 0; x < g.out_w; ++x) {
        const Taps<acc_t>& tx = tw[x];
        const acc_t wx0 = acc_t(1) - tx.l1, wx1 = tx.l1;
        const bits_t* a = top + tx.i0 * C;
        const bits_t* b = top + tx.i1 * C;
        const bits_t* c = bottom + tx.i0 * C;
        const bits_t* d = bottom + tx.i1 * C;
        for (int64_t ch = 0; ch < C; ++ch) {
          const acc_t upper = wx0 * acc_t(Storage::load(a[ch])) + wx1 * acc_t(Storage::load(b[ch]));
          const acc_t lower = wx0 * acc_t(Storage::load(c[ch])) + wx1 * acc_t(Storage::load(d[ch]));
          o[x * C + ch] = Storage::store(wy0 * upper + wy1 * lower);
        }
      }
    }
  });
}

namespace {

// Per input index of one axis, the output indices that read it and their weights, flat.
template <typename acc_t>
struct Readers {
  std::vector<int64_t> offset;  // readers of i: [offset[i], offset[i + 1])
  std::vector<int> index;
  std::vector<acc_t> weight;

  explicit Readers(const AxisMap<acc_t>& axis) : offset(axis.in_size + 1, 0) {
    for (int i = 0; i < axis.in_size; ++i) {
      for (int d = first_reader(axis, i), end = end_reader(axis, i); d < end; ++d) {
        index.push_back(d);
        weight.push_back(tap_weight(taps(axis, d), i));
      }
      offset[i + 1] = static_cast<int64_t>(index.size());
    }
  }
};

}  // namespace

template <typename Storage, typename acc_t, typename bits_t = typename Storage::type>
void backward_kernel(const bits_t* grad_out, bits_t* grad_in, const Geometry& g,
                     const AxisMap<acc_t>& hmap, const AxisMap<acc_t>& wmap) {
  const Readers<acc_t> rows(hmap), cols(wmap);
  const int64_t C = g.channels;
  const int64_t in_row = g.in_w * C, in_plane = g.in_h * in_row;
  const int64_t out_row = g.out_w * C, out_plane = g.out_h * out_row;
  ops_common::parallel_for(0, g.planes * g.in_h, grain_rows(out_row * 4), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> sum(in_row);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / g.in_h;
      const int64_t y = r % g.in_h;
      std::fill(sum.begin(), sum.end(), acc_t(0));
      for (int64_t k = rows.offset[y]; k < rows.offset[y + 1]; ++k) {
        const acc_t wy = rows.weight[k];
        const bits_t* g_row = grad_out + p * out_plane + rows.index[k] * out_row;
        for (int x = 0; x < g.in_w; ++x) {
          acc_t* s = sum.data() + x * C;
          for (int64_t j = cols.offset[x]; j < cols.offset[x + 1]; ++j) {
            const acc_t w = wy * cols.weight[j];
            const bits_t* src = g_row + cols.index[j] * C;
            for (int64_t ch = 0; ch < C; ++ch) s[ch] += w * acc_t(Storage::load(src[ch]));
          }
        }
      }
      bits_t* o = grad_in + p * in_plane + y * in_row;
      for (int64_t e = 0; e < in_row; ++e) o[e] = Storage::store(sum[e]);
    }
  });
}

// One dtype per object where the loader compiles the unit in slices (cpu_loops.h).
#define RESIZE_DEFINE_CPU_KERNELS(T, ACC)                                                     \
  void forward_cpu(const T* input, T* output, const Geometry& geometry,                      \
                   const AxisMap<ACC>& rows, const AxisMap<ACC>& cols) {                     \
    using S = ops_common::CpuStorage<T>;                                                      \
    forward_kernel<S>(reinterpret_cast<const S::type*>(input),                                \
                      reinterpret_cast<S::type*>(output), geometry, rows, cols);              \
  }                                                                                           \
  void backward_cpu(const T* grad_output, T* grad_input, const Geometry& geometry,           \
                    const AxisMap<ACC>& rows, const AxisMap<ACC>& cols) {                    \
    using S = ops_common::CpuStorage<T>;                                                      \
    backward_kernel<S>(reinterpret_cast<const S::type*>(grad_output),                         \
                       reinterpret_cast<S::type*>(grad_input), geometry, rows, cols);         \
  }
OPS_CPU_SLICE_0(RESIZE_DEFINE_CPU_KERNELS(float, float))
OPS_CPU_SLICE_1(RESIZE_DEFINE_CPU_KERNELS(double, double))
OPS_CPU_SLICE_2(RESIZE_DEFINE_CPU_KERNELS(c10::Half, float))
OPS_CPU_SLICE_3(RESIZE_DEFINE_CPU_KERNELS(c10::BFloat16, float))
#undef RESIZE_DEFINE_CPU_KERNELS

}  // namespace resize_op
