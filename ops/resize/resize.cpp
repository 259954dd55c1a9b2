// resize: schema and CPU kernels of the bilinear resize with a selectable coordinate mode,
// on the stable ABI (its autograd is in resize.py).
// Coordinates come from resize.h, shared with the CUDA kernels. The backward gathers: each
// input pixel sums the output pixels that read it (ranges from first_reader/end_reader),
// in a fixed order, so its result does not depend on the number of threads.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <string>
#include <vector>

#include "resize.h"
#include "resize_host.h"

namespace {

using namespace resize_op;

// Rows per parallel task: about 32k output elements.
int64_t grain_rows(int64_t row_elements) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, row_elements));
}

template <typename scalar_t>
void forward_cpu_kernel(const scalar_t* in, scalar_t* out, const Plan& plan) {
  using acc_t = ops_common::opmath_t<scalar_t>;
  const Geometry& g = plan.geometry;
  const AxisMap<acc_t> hmap = height_map<acc_t>(plan), wmap = width_map<acc_t>(plan);
  std::vector<Taps<acc_t>> th(g.out_h), tw(g.out_w);
  for (int y = 0; y < g.out_h; ++y) th[y] = taps(hmap, y);
  for (int x = 0; x < g.out_w; ++x) tw[x] = taps(wmap, x);
  const int64_t C = g.channels;
  const int64_t in_row = g.in_w * C, in_plane = g.in_h * in_row;
  const int64_t out_row = g.out_w * C, out_plane = g.out_h * out_row;
  torch::stable::parallel_for(0, g.planes * g.out_h, grain_rows(out_row), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / g.out_h;
      const Taps<acc_t>& ty = th[r % g.out_h];
      const scalar_t* top = in + p * in_plane + ty.i0 * in_row;
      const scalar_t* bottom = in + p * in_plane + ty.i1 * in_row;
      scalar_t* o = out + p * out_plane + (r % g.out_h) * out_row;
      const acc_t wy0 = acc_t(1) - ty.l1, wy1 = ty.l1;
      for (int x = 0; x < g.out_w; ++x) {
        const Taps<acc_t>& tx = tw[x];
        const acc_t wx0 = acc_t(1) - tx.l1, wx1 = tx.l1;
        const scalar_t* a = top + tx.i0 * C;
        const scalar_t* b = top + tx.i1 * C;
        const scalar_t* c = bottom + tx.i0 * C;
        const scalar_t* d = bottom + tx.i1 * C;
        for (int64_t ch = 0; ch < C; ++ch) {
          const acc_t upper = wx0 * static_cast<acc_t>(a[ch]) + wx1 * static_cast<acc_t>(b[ch]);
          const acc_t lower = wx0 * static_cast<acc_t>(c[ch]) + wx1 * static_cast<acc_t>(d[ch]);
          o[x * C + ch] = static_cast<scalar_t>(wy0 * upper + wy1 * lower);
        }
      }
    }
  });
}

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

template <typename scalar_t>
void backward_cpu_kernel(const scalar_t* grad_out, scalar_t* grad_in, const Plan& plan) {
  using acc_t = ops_common::opmath_t<scalar_t>;
  const Geometry& g = plan.geometry;
  const Readers<acc_t> rows(height_map<acc_t>(plan)), cols(width_map<acc_t>(plan));
  const int64_t C = g.channels;
  const int64_t in_row = g.in_w * C, in_plane = g.in_h * in_row;
  const int64_t out_row = g.out_w * C, out_plane = g.out_h * out_row;
  torch::stable::parallel_for(0, g.planes * g.in_h, grain_rows(out_row * 4), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> sum(in_row);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / g.in_h;
      const int64_t y = r % g.in_h;
      std::fill(sum.begin(), sum.end(), acc_t(0));
      for (int64_t k = rows.offset[y]; k < rows.offset[y + 1]; ++k) {
        const acc_t wy = rows.weight[k];
        const scalar_t* g_row = grad_out + p * out_plane + rows.index[k] * out_row;
        for (int x = 0; x < g.in_w; ++x) {
          acc_t* s = sum.data() + x * C;
          for (int64_t j = cols.offset[x]; j < cols.offset[x + 1]; ++j) {
            const acc_t w = wy * cols.weight[j];
            const scalar_t* src = g_row + cols.index[j] * C;
            for (int64_t ch = 0; ch < C; ++ch) s[ch] += w * static_cast<acc_t>(src[ch]);
          }
        }
      }
      scalar_t* o = grad_in + p * in_plane + y * in_row;
      for (int64_t e = 0; e < in_row; ++e) o[e] = static_cast<scalar_t>(sum[e]);
    }
  });
}

Tensor resize_forward_cpu(const Tensor& input, std::vector<int64_t> output_size,
                          std::string coordinate_mode, std::optional<std::vector<double>> scale_factors) {
  const Plan plan = forward_plan("resize.forward", input, output_size, coordinate_mode, scale_factors);
  Tensor out = empty_result(plan, {plan.n, plan.c, output_size[0], output_size[1]}, input);
  if (out.numel() == 0) return out;
  const Tensor in = torch::stable::contiguous(input, plan.format);
  OPS_DISPATCH_FLOATING(in.scalar_type(), "resize_forward_cpu", [&] {
    forward_cpu_kernel(in.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), plan);
  });
  return out;
}

Tensor resize_backward_cpu(const Tensor& grad_output, std::vector<int64_t> input_size,
                           std::string coordinate_mode, std::optional<std::vector<double>> scale_factors) {
  const Plan plan = backward_plan("resize.backward", grad_output, input_size, coordinate_mode,
                                  scale_factors);
  Tensor grad_in = empty_result(plan, input_size, grad_output);
  if (grad_in.numel() == 0) return grad_in;
  const Tensor g = torch::stable::contiguous(grad_output, plan.format);
  OPS_DISPATCH_FLOATING(g.scalar_type(), "resize_backward_cpu", [&] {
    backward_cpu_kernel(g.const_data_ptr<scalar_t>(), grad_in.mutable_data_ptr<scalar_t>(), plan);
  });
  return grad_in;
}

}  // namespace

STABLE_TORCH_LIBRARY(resize, m) {
  m.def("forward(Tensor input, SymInt[2] output_size, str coordinate_mode, float[]? scale_factors) -> Tensor");
  m.def("backward(Tensor grad_output, SymInt[4] input_size, str coordinate_mode, float[]? scale_factors) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(resize, CPU, m) {
  m.impl("forward", TORCH_BOX(&resize_forward_cpu));
  m.impl("backward", TORCH_BOX(&resize_backward_cpu));
}
