"""The files of ``new NAME --aten --schema "NAME(Tensor x, Tensor weight, float eps) -> Tensor"``
(an ATen op).

Every file follows the schema: the C++ schema, the host checks (one per tensor
argument), the CPU and CUDA kernels, the fake kernels, the autograd (one gradient per
tensor argument), the reference with sample arguments, and the tests. The math is a
placeholder that every such schema supports, elementwise over tensors of one shape:

    y = scale * sum over tensor arguments t of t * |t|,    scale = product of the numeric
                                                           scalar arguments (1 if none)

so d y / d t = grad * scale * 2 |t|. Replace it in ``<name>.h`` and ``reference.py``
together; a row reduction also changes the kernels' loops and the shape checks (the
bundled ``scatter`` shows a reduction, ``lltm`` an op of several inputs and results).
"""

from __future__ import annotations

from jit_tools.tools.op_schema import Schema

# Sample values of scalar arguments in example_inputs (the tests use them).
SAMPLE_SCALARS = {"float": "0.75", "int": "3", "bool": "True"}


def _lines(items, indent: str = "", sep: str = "\n") -> str:
    return sep.join(indent + item for item in items)


def fields(schema: Schema) -> dict[str, str]:
    """The pieces of code, derived from the schema, that the templates below take."""
    name = schema.name
    tensors = [a.name for a in schema.tensors]
    first, others = tensors[0], tensors[1:]
    numeric = [a.name for a in schema.scalars if a.type in ("float", "int")]
    flags = [a.name for a in schema.scalars if a.type == "bool"]
    grads = [f"{t}_grad" for t in tensors]
    multi = len(tensors) > 1
    tuple_type = f"std::tuple<{', '.join(['at::Tensor'] * len(tensors))}>"
    T_params = ", ".join(f"T {t}" for t in tensors)
    cpp_args = ", ".join(f"{a.cpp_type} {a.name}" for a in schema.arguments)
    arg_names = ", ".join(a.name for a in schema.arguments)
    py_params = ", ".join(f"{a.name}: {a.py_type}" + (f" = {a.py_default}" if a.default else "")
                          for a in schema.arguments)
    fake_params = ", ".join(a.name + (f"={a.py_default}" if a.default else "") for a in schema.arguments)
    scale_cpp = " * ".join(a.name if a.type == "float" else f"static_cast<double>({a.name})"
                           for a in schema.scalars if a.type in ("float", "int")) or "1.0"
    scale_py = " * ".join(numeric) or "1.0"
    scale_words = (" * ".join(numeric) if numeric else "1") + (
        f" ({', '.join(flags)} unused by the placeholder)" if flags else "")
    sum_cpp = " + ".join(f"signed_square({t})" for t in tensors)
    sum_py = " + ".join(f"{t} * {t}.abs()" for t in tensors)
    f = {
        "name": name,
        "first": first,
        "schema_forward": f"forward({schema.declaration()}) -> Tensor",
        "schema_backward": (f"backward(Tensor grad, {schema.declaration(False)}) -> "
                            + (f"({', '.join(['Tensor'] * len(tensors))})" if multi else "Tensor")),
        "T_params": T_params,
        "cpp_args": cpp_args,
        "arg_names": arg_names,
        "fake_params": fake_params,
        "scale_cpp": scale_cpp,
        "scale_words": scale_words,
        "sum_cpp": sum_cpp,
        "backward_type": tuple_type if multi else "at::Tensor",
        "tensor_list": ", ".join(tensors),
        "tensor_names": ", ".join(f'"{t}"' for t in tensors) + ("," if not multi else ""),
        "py_params": py_params,
        "scale_py": scale_py,
        "sum_py": sum_py,
        "differentiable": " and ".join(tensors),
    }
    # <name>.h: one derivative per tensor argument.
    f["math_backward"] = _lines(
        [f"// d y / d {t}\n"
         f"template <typename T>\n"
         f"OPS_HOST_DEVICE T backward_{t}(T grad, {T_params}, T scale) {{\n"
         f"  return grad * scale * T(2) * ({t} < T(0) ? -{t} : {t});\n"
         f"}}" for t in tensors], sep="\n\n")
    # <name>_host.h: the checks of the other tensors against the first.
    f["check_others"] = _lines(
        [f'OP_CHECK_SAME_DEVICE(op, "{t}", {t}, "{first}", {first});\n'
         f'  OP_CHECK_SAME_DTYPE(op, "{t}", {t}, "{first}", {first});\n'
         f'  TORCH_CHECK({t}.sizes() == {first}.sizes(), op, ": {t} must have the shape of {first} ",\n'
         f'              {first}.sizes(), ", got ", {t}.sizes());' for t in others], indent="  ")
    # CPU kernels.
    f["contiguous"] = _lines([f"const at::Tensor {t}_c = {t}.contiguous();" for t in tensors], "  ")
    f["pointers"] = _lines([f"const scalar_t* {t}_p = {t}_c.const_data_ptr<scalar_t>();" for t in tensors],
                           "    ")
    values = ", ".join(f"{t}_i" for t in tensors)
    f["forward_cpu_loop"] = _lines(
        [f"const acc {t}_i = {t}_p[i];" for t in tensors]
        + [f"out[i] = static_cast<scalar_t>({name}_op::forward({values}, acc_scale));"], "        ")
    f["grad_alloc"] = _lines([f"at::Tensor {g} = at::empty({first}_c.sizes(), {first}_c.options());"
                              for g in grads], "  ")
    f["grad_pointers"] = _lines([f"scalar_t* {g}_p = {g}.mutable_data_ptr<scalar_t>();" for g in grads],
                                "    ")
    f["backward_cpu_loop"] = _lines(
        ["const acc grad_i = grad_p[i];"] + [f"const acc {t}_i = {t}_p[i];" for t in tensors]
        + [f"{t}_grad_p[i] = static_cast<scalar_t>(\n"
           f"            {name}_op::backward_{t}(grad_i, {values}, acc_scale));" for t in tensors],
        "        ")
    f["return_grads"] = "{" + ", ".join(grads) + "}" if multi else grads[0]
    # CUDA.
    f["T_ptrs"] = ", ".join(f"const T* {t}" for t in tensors)
    f["T_out_ptrs"] = ", ".join(f"T* {g}" for g in grads)
    f["restrict_ptrs"] = ", ".join(f"const T* __restrict__ {t}" for t in tensors)
    f["restrict_out_ptrs"] = ", ".join(f"T* __restrict__ {g}" for g in grads)
    f["forward_cuda_loop"] = _lines(
        [f"const acc_t<T> {t}_i = to_acc({t}[i]);" for t in tensors]
        + [f"y[i] = from_acc<T>(forward({values}, scale));"], "    ")
    f["backward_cuda_loop"] = _lines(
        ["const acc_t<T> grad_i = to_acc(grad[i]);"]
        + [f"const acc_t<T> {t}_i = to_acc({t}[i]);" for t in tensors]
        + [f"{t}_grad[i] = from_acc<T>(backward_{t}(grad_i, {values}, scale));" for t in tensors], "    ")
    f["ptr_names"] = ", ".join(tensors)
    f["grad_names"] = ", ".join(grads)
    f["inst_ptrs"] = ", ".join(["const T*"] * len(tensors))
    f["inst_out_ptrs"] = ", ".join(["T*"] * len(tensors))
    f["cuda_ptrs"] = ", ".join(f"cuda_ptr<scalar_t>({t}_c)" for t in tensors)
    f["cuda_grad_ptrs"] = ", ".join(f"cuda_ptr<scalar_t>({g})" for g in grads)
    # Python surface.
    f["fake_check_others"] = _lines(
        [f'torch._check({t}.dtype == {first}.dtype,\n'
         f'                 lambda: f"{{op}}: {t} has dtype {{{t}.dtype}} but {first} has dtype "\n'
         f'                         f"{{{first}.dtype}}")\n'
         f'    torch._check({t}.shape == {first}.shape,\n'
         f'                 lambda: f"{{op}}: {t} must have the shape of {first} {{list({first}.shape)}}, "\n'
         f'                         f"got {{list({t}.shape)}}")' for t in others], "    ")
    f["same_device_kwargs"] = ", ".join(f"{t}={t}" for t in tensors)
    f["fake_return"] = (
        f"return tuple(torch.empty_like(t, memory_format=torch.contiguous_format)\n"
        f"                 for t in ({', '.join(tensors)}))"
        if multi else f"return torch.empty_like({first}, memory_format=torch.contiguous_format)")
    f["backward_args"] = ", ".join(f'"{n}"' for n in ["grad", *(a.name for a in schema.arguments)])
    f["gives"] = ", ".join(f'"{t}"' for t in tensors)
    # Reference.
    f["reference_grads"] = ", ".join(f"grad * scale * 2 * {t}.abs()" for t in tensors) + (
        "," if not multi else "")
    f["grads_as_tuple"] = "grads" if multi else "(grads,)"
    f["example_tensors"] = _lines([f"{t} = torch.randn(shape, device=device).to(dtype)"
                                   for t in tensors], "    ")
    example = tensors + [SAMPLE_SCALARS[a.type] for a in schema.scalars]
    f["example_return"] = ", ".join(example) + ("," if len(example) == 1 else "")
    f["example_doc"] = ", ".join(a.name for a in schema.arguments)
    f["others_list"] = ", ".join(f'"{t}"' for t in others)
    f["scalar_defaults_doc"] = ", ".join(f"{a.name}={SAMPLE_SCALARS[a.type]}" for a in schema.scalars)
    return f


def templates(cuda: bool) -> list[tuple[str, str]]:
    """(file name pattern, template) of the op folder; ``$name`` in the pattern too."""
    out = [("$name.h", MATH_H), ("${name}_host.h", HOST_H), ("$name.cpp", CPU_CPP)]
    if cuda:
        out += [("${name}_cuda.h", CUDA_H), ("${name}_cuda.cu", CUDA_CU), ("${name}_cuda.cpp", CUDA_CPP)]
    out += [("$name.py", SURFACE_PY), ("reference.py", REFERENCE_PY), ("__init__.py", INIT_PY)]
    return out


MATH_H = """\
#pragma once
// $name's math, shared by the CPU loop and the CUDA kernels (torch-free, so the .cu
// that includes it compiles in about a second). Called with the accumulation type:
// float for half and bfloat16 storage, else the storage type.
#include "common/host_device.h"

namespace ${name}_op {

template <typename T>
OPS_HOST_DEVICE T signed_square(T v) {
  return v < T(0) ? -v * v : v * v;
}

// The placeholder: y = scale * (sum of t * |t| over the tensor arguments), elementwise;
// scale = $scale_words. Replace it, and reference.py with it.
template <typename T>
OPS_HOST_DEVICE T forward($T_params, T scale) {
  return scale * ($sum_cpp);
}

$math_backward

}  // namespace ${name}_op
"""

HOST_H = """\
#pragma once
// $name: argument checks shared by the CPU and CUDA backends (host only). Each error
// names the op, the argument and the bad value.
#include <ATen/ATen.h>

#include "common/checks.h"

namespace ${name}_op {

// The placeholder math is elementwise, so every tensor has $first's shape. An op of other
// shapes checks ranks and sizes instead, e.g. OP_CHECK_DIM(op, "$first", $first, 2) and
// OP_CHECK_SIZE(op, "weight", weight, 0, $first.size(1)) (common/checks.h).
inline void check_inputs(const char* op, $cpp_args) {
  OP_CHECK_FLOATING(op, "$first", $first);
$check_others
}

inline void check_backward(const at::Tensor& grad, $cpp_args) {
  constexpr const char* op = "$name.backward";
  check_inputs(op, $arg_names);
  OP_CHECK_SAME_DEVICE(op, "grad", grad, "$first", $first);
  OP_CHECK_SAME_DTYPE(op, "grad", grad, "$first", $first);
  TORCH_CHECK(grad.sizes() == $first.sizes(), op, ": grad has shape ", grad.sizes(), " but $first has shape ",
              $first.sizes());
}

}  // namespace ${name}_op
"""

CPU_CPP = """\
// $name: schema and CPU kernels. The math is in $name.h, the checks in ${name}_host.h.
// Inputs of any layout are made contiguous; outputs are contiguous.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <tuple>

#include "${name}.h"
#include "${name}_host.h"

namespace {

// Elements per parallel task: below this, waking threads costs more than it saves.
constexpr int64_t kGrain = 32768;

at::Tensor forward_cpu($cpp_args) {
  ${name}_op::check_inputs("$name.forward", $arg_names);
$contiguous
  at::Tensor result = at::empty(${first}_c.sizes(), ${first}_c.options());
  const double scale = $scale_cpp;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ${first}_c.scalar_type(), "$name.forward", [&] {
    using acc = at::opmath_type<scalar_t>;
$pointers
    scalar_t* out = result.mutable_data_ptr<scalar_t>();
    const acc acc_scale = static_cast<acc>(scale);
    at::parallel_for(0, ${first}_c.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
$forward_cpu_loop
      }
    });
  });
  return result;
}

$backward_type backward_cpu(const at::Tensor& grad, $cpp_args) {
  ${name}_op::check_backward(grad, $arg_names);
  const at::Tensor grad_c = grad.contiguous();
$contiguous
$grad_alloc
  const double scale = $scale_cpp;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ${first}_c.scalar_type(), "$name.backward", [&] {
    using acc = at::opmath_type<scalar_t>;
    const scalar_t* grad_p = grad_c.const_data_ptr<scalar_t>();
$pointers
$grad_pointers
    const acc acc_scale = static_cast<acc>(scale);
    at::parallel_for(0, ${first}_c.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
$backward_cpu_loop
      }
    });
  });
  return $return_grads;
}

}  // namespace

TORCH_LIBRARY($name, m) {
  m.def("$schema_forward");
  m.def("$schema_backward");
}

TORCH_LIBRARY_IMPL($name, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("backward", &backward_cpu);
}
"""

CUDA_H = """\
#pragma once
// $name: launchers of the CUDA kernels in ${name}_cuda.cu (torch-free). T is float,
// double, ops_common::half_t or bfloat16_t (common/cuda_types.h); buffers are contiguous
// with n elements. Each returns cudaGetLastError() after its launch.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/cuda_types.h"

namespace ${name}_op {

template <typename T>
cudaError_t launch_forward($T_ptrs, double scale, T* y, int64_t n, cudaStream_t stream);

template <typename T>
cudaError_t launch_backward(const T* grad, $T_ptrs, double scale, $T_out_ptrs, int64_t n,
                            cudaStream_t stream);

}  // namespace ${name}_op
"""

CUDA_CU = """\
// $name: CUDA kernels, torch-free (CUDA headers, ops/common's torch-free headers and
// $name.h only). Grid-stride loops with 64-bit indices; float accumulation for 16-bit types.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_convert.cuh"
#include "common/launch.h"
#include "${name}.h"
#include "${name}_cuda.h"

namespace ${name}_op {
namespace {

using ops_common::acc_t;
using ops_common::from_acc;
using ops_common::to_acc;

constexpr int kThreads = 256;

template <typename T>
__global__ void forward_kernel($restrict_ptrs, acc_t<T> scale, T* __restrict__ y, int64_t n) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
$forward_cuda_loop
  }
}

template <typename T>
__global__ void backward_kernel(const T* __restrict__ grad, $restrict_ptrs, acc_t<T> scale,
                                $restrict_out_ptrs, int64_t n) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
$backward_cuda_loop
  }
}

// As many blocks as the device holds at once; the grid-stride loop covers the rest.
unsigned int blocks_for(int64_t n) {
  return ops_common::grid_size(
      n, kThreads, ops_common::resident_blocks(ops_common::blocks_per_sm_by_threads(kThreads)));
}

}  // namespace

template <typename T>
cudaError_t launch_forward($T_ptrs, double scale, T* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>($ptr_names, static_cast<acc_t<T>>(scale), y, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_backward(const T* grad, $T_ptrs, double scale, $T_out_ptrs, int64_t n,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(grad, $ptr_names, static_cast<acc_t<T>>(scale),
                                                             $grad_names, n);
  return cudaGetLastError();
}

#define ${name}_INSTANTIATE(T)                                                              \\
  template cudaError_t launch_forward<T>($inst_ptrs, double, T*, int64_t, cudaStream_t);      \\
  template cudaError_t launch_backward<T>(const T*, $inst_ptrs, double, $inst_out_ptrs, int64_t, \\
                                         cudaStream_t);

${name}_INSTANTIATE(float)
${name}_INSTANTIATE(double)
${name}_INSTANTIATE(ops_common::half_t)
${name}_INSTANTIATE(ops_common::bfloat16_t)

}  // namespace ${name}_op
"""

CUDA_CPP = """\
// $name: CUDA host side (checks, device guard, current stream, dtype dispatch,
// allocation) around the torch-free launchers of ${name}_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <tuple>

#include "common/cuda_host.h"
#include "${name}_cuda.h"
#include "${name}_host.h"

namespace {

using ops_common::cuda_ptr;
using ops_common::cuda_t;

at::Tensor forward_cuda($cpp_args) {
  ${name}_op::check_inputs("$name.forward", $arg_names);
  const c10::cuda::CUDAGuard guard(${first}.device());
$contiguous
  at::Tensor result = at::empty(${first}_c.sizes(), ${first}_c.options());
  if (result.numel() == 0) return result;
  const double scale = $scale_cpp;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ${first}_c.scalar_type(), "$name.forward", [&] {
    OPS_CHECK_LAUNCH(${name}_op::launch_forward<cuda_t<scalar_t>>(
        $cuda_ptrs, scale, cuda_ptr<scalar_t>(result), result.numel(),
        ops_common::current_stream()));
  });
  return result;
}

$backward_type backward_cuda(const at::Tensor& grad, $cpp_args) {
  ${name}_op::check_backward(grad, $arg_names);
  const c10::cuda::CUDAGuard guard(${first}.device());
  const at::Tensor grad_c = grad.contiguous();
$contiguous
$grad_alloc
  if (${first}_c.numel() == 0) return $return_grads;
  const double scale = $scale_cpp;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ${first}_c.scalar_type(), "$name.backward", [&] {
    OPS_CHECK_LAUNCH(${name}_op::launch_backward<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(grad_c), $cuda_ptrs, scale, $cuda_grad_ptrs,
        ${first}_c.numel(), ops_common::current_stream()));
  });
  return $return_grads;
}

}  // namespace

TORCH_LIBRARY_IMPL($name, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}
"""

SURFACE_PY = '''\
"""Python surface of the $name op: a differentiable function and an nn.Module over
``torch.ops.$name.forward/backward``.

Registered through ``LIB`` so that the loader can withdraw these registrations when it
reloads the op. Ops are looked up at call time, so handles given out earlier call the
newest build.
"""

from __future__ import annotations

import torch

import jit_loader

jit_loader.load_library(__file__)

LIB = torch.library.Library("$name", "FRAGMENT")


def _check_inputs(op: str, $tensor_list) -> None:
    """What ${name}_host.h checks, without data: fake kernels raise the same errors."""
    jit_loader.check_same_device(op, $same_device_kwargs)
    torch._check($first.is_floating_point(),
                 lambda: f"{op}: $first must be a floating-point tensor, got {$first.dtype}")
$fake_check_others


# Fake kernels: output shapes and dtypes without computing, for torch.compile and export.
@torch.library.register_fake("$name::forward", lib=LIB)
def _forward_fake($fake_params):
    _check_inputs("$name.forward", $tensor_list)
    return torch.empty_like($first, memory_format=torch.contiguous_format)


@torch.library.register_fake("$name::backward", lib=LIB)
def _backward_fake(grad, $arg_names):
    op = "$name.backward"
    _check_inputs(op, $tensor_list)
    jit_loader.check_same_device(op, $first=$first, grad=grad)
    torch._check(grad.dtype == $first.dtype,
                 lambda: f"{op}: grad has dtype {grad.dtype} but $first has dtype {$first.dtype}")
    torch._check(grad.shape == $first.shape,
                 lambda: f"{op}: grad has shape {list(grad.shape)} but $first has shape {list($first.shape)}")
    $fake_return


# Autograd: the backward op takes the incoming gradient and every argument, and gives one
# gradient per tensor argument (none for the scalars). The loader's C++ autograd kernel
# serves it where that is built (no Python per call), register_autograd elsewhere.
jit_loader.register_autograd_op("$name::forward", "$name::backward", [$backward_args],
                                gives=[$gives], lib=LIB)


# The forward op, resolved when this file runs (the loader runs it again for every build)
# and called through the loader's fast entry (the overload itself for a schema it does not
# take), which skips torch.ops's argument conversion on every call.
_FORWARD = jit_loader.fast_op(torch.ops.$name.forward.default)


def $name($py_params) -> torch.Tensor:
    """The $name op, differentiable in $differentiable."""
    return _FORWARD($arg_names)


class $Class(torch.nn.Module):
    """``$name`` as a module."""

    def forward(self, $py_params) -> torch.Tensor:
        return $name($arg_names)
'''

REFERENCE_PY = '''\
"""Plain-PyTorch reference for the $name op, written for clarity.

Tests compare the op against it, and ``check_cases`` is what ``jit_loader.check_op`` (and
experiments/run_all.py) runs; importing this module builds nothing.
"""

from __future__ import annotations

import torch

# Agreement expected with the float64 reference, per input dtype: 16-bit results are
# computed in float and rounded once.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=1e-2, rtol=1e-3),
    torch.bfloat16: dict(atol=8e-2, rtol=8e-3),
}

# The op's tensor arguments, in order; the others are scalars.
TENSORS = ($tensor_names)


def ${name}_reference($py_params) -> torch.Tensor:
    """The placeholder: y = scale * (sum of t * |t| over the tensors), scale = $scale_words."""
    scale = $scale_py
    return scale * ($sum_py)


def ${name}_backward_reference(grad: torch.Tensor, $py_params):
    """The gradient of each tensor argument ($tensor_list), in order."""
    scale = $scale_py
    return ($reference_grads)


def example_inputs(device="cpu", dtype=torch.float32, shape=(64, 32)) -> tuple:
    """Fresh random arguments ($example_doc): tensors of one shape, both signs."""
$example_tensors
    return ($example_return)


def check_cases(device="cpu") -> dict[str, dict]:
    """What every check of the op runs (``jit_loader.check_op``): the op on fresh random
    arguments against the reference evaluated in float64 on the same values, in float32 and
    float64, plus bfloat16 on CUDA, within TOLERANCES, the gradients of every tensor
    included; gradcheck, opcheck, torch.compile. Each case is jit_loader.check's arguments,
    ``fn`` naming the surface function."""
    dtypes = (torch.float32, torch.float64)
    if torch.device(device).type == "cuda":
        dtypes += (torch.bfloat16,)
    args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a
                 for a in example_inputs(device, torch.float64))
    return {"$name": dict(fn="$name", inputs=args, reference=${name}_reference, dtypes=dtypes,
                         reference_dtype=torch.float64)}
'''

INIT_PY = '''\
"""$name: forward and backward of the schema "$schema_forward"$devices_note.

Load with ``jit_loader.load(<this folder>)`` (or by name when it sits in ops/);
``reference.py`` holds the plain-PyTorch reference, importable without building anything.
"""
'''

TEST_PY = '''\
"""The $name op, specified as tests: forward and the gradient of every tensor argument
($tensor_list) on every device and floating dtype, for any layout, against the float64
reference in reference.py on fresh random inputs (reference.example_inputs). CUDA cases
are marked ``cuda`` and skipped where no GPU is visible.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import jit_loader

OP_DIR = $op_dir_expr
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
$devices


def _import_reference():
    spec = importlib.util.spec_from_file_location("_${name}_reference", OP_DIR / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _import_reference()


@pytest.fixture(scope="module")
def op():
    return jit_loader.load(OP_DIR)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def relayout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout."""
    if layout == "transposed" and t.dim() >= 2:
        return t.mT.contiguous().mT
    if layout == "strided" and t.dim() >= 1:
        wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], device=t.device, dtype=t.dtype)
        return wide[..., ::2].copy_(t)
    if layout == "storage_offset":
        return torch.empty(t.numel() + 1, device=t.device, dtype=t.dtype)[1:].view(t.shape).copy_(t)
    return t


def arguments(device, dtype, layout="contiguous", shape=(64, 32)):
    return [relayout(a, layout) if isinstance(a, torch.Tensor) else a
            for a in reference.example_inputs(device, dtype, shape)]


def exact(args):
    return [a.detach().double() if isinstance(a, torch.Tensor) else a for a in args]


def tensors(args):
    return [a for a in args if isinstance(a, torch.Tensor)]


def assert_matches(got, want, dtype):
    assert got.dtype == dtype
    assert got.shape == want.shape
    torch.testing.assert_close(got.double(), want.double(), **reference.TOLERANCES[dtype])


LAYOUTS = ["contiguous", "transposed", "strided", "storage_offset"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_forward_matches_reference(op, device, dtype, layout):
    args = arguments(device, dtype, layout)
    before = [t.clone() for t in tensors(args)]
    assert_matches(op.$name(*args), reference.${name}_reference(*exact(args)), dtype)
    assert all(torch.equal(t, b) for t, b in zip(tensors(args), before))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_gradient_matches_reference(op, device, dtype, layout):
    args = arguments(device, dtype, layout)
    for t in tensors(args):
        t.requires_grad_()
    y = op.$name(*args)
    grad = relayout(torch.randn_like(y), layout)
    y.backward(grad)
    wants = reference.${name}_backward_reference(grad.double(), *exact(args))
    assert len(wants) == len(reference.TENSORS)
    for t, want in zip(tensors(args), wants):
        assert_matches(t.grad, want, dtype)


def test_empty_inputs(op, device):
    args = arguments(device, torch.float32, shape=(0, 32))
    y = op.$name(*args)
    grads = torch.ops.$name.backward(y, *args)
    assert y.shape == (0, 32) and all(g.shape == (0, 32) for g in $grads_as_tuple)


def test_gradcheck(op, device):
    args = arguments(device, torch.float64, shape=(3, 5))
    for t in tensors(args):
        t.requires_grad_()
    assert torch.autograd.gradcheck(op.$name, tuple(args))
    assert torch.autograd.gradcheck(op.$Class(), tuple(args))


def test_opcheck(op, device):
    args = arguments(device, torch.float32, shape=(3, 17))
    for t in tensors(args):
        t.requires_grad_()
    torch.library.opcheck(torch.ops.$name.forward.default, tuple(args))
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    torch.library.opcheck(torch.ops.$name.backward.default, (torch.randn_like(plain[0]), *plain))


def test_compile_fullgraph(op):
    fn = op.$name  # resolve the Op handle outside the traced function

    def f(first, *rest):
        return fn(first * 2, *rest) + 1

    torch.compiler.reset()
    compiled = torch.compile(f, fullgraph=True)
    args = arguments("cpu", torch.float32, shape=(8, 33))
    for t in tensors(args):
        t.requires_grad_()
    eager_args = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    y = compiled(*args)
    y.sum().backward()
    y_eager = f(*eager_args)
    y_eager.sum().backward()
    torch.testing.assert_close(y, y_eager)
    for t, t_eager in zip(tensors(args), tensors(eager_args)):
        torch.testing.assert_close(t.grad, t_eager.grad)


def test_check(op, device):
    """jit_loader.check over reference.check_cases: the reference, gradcheck, opcheck, compile."""
    results = jit_loader.check_op(op, device, verbose=False)
    assert results and all(results), [r.table() for r in results if not r]


@pytest.mark.parametrize("dtype, dtype_name", [(torch.int64, "Long"), (torch.bool, "Bool")])
def test_rejects_non_floating_input(op, device, dtype, dtype_name):
    args = arguments(device, torch.float32)
    args[0] = torch.ones(args[0].shape, device=device, dtype=dtype)
    message = f"$name.forward: $first must be a floating-point tensor, got {dtype_name}"
    with pytest.raises(RuntimeError, match=message):
        torch.ops.$name.forward(*args)


def test_backward_rejects_mismatched_grad(op, device):
    args = arguments(device, torch.float32)
    message = r"$name.backward: grad has shape \\[3, 32\\] but $first has shape \\[64, 32\\]"
    with pytest.raises(RuntimeError, match=message):
        torch.ops.$name.backward(torch.ones(3, 32, device=device), *args)


def test_fake_kernels_reject_meta_mixed_with_cpu(op):
    """One argument on meta runs the fake kernel, which names the device mismatch."""
    args = arguments("cpu", torch.float32)
    with pytest.raises(RuntimeError, match="$name.backward: grad is on meta but $first is on cpu"):
        torch.ops.$name.backward(torch.ones(64, 32, device="meta"), *args)
    for name in reference.TENSORS[1:]:
        i = reference.TENSORS.index(name)
        wrong = list(args)
        wrong[i] = args[i].to("meta")
        with pytest.raises(RuntimeError, match=f"$name.forward: {name} is on meta but $first is on cpu"):
            torch.ops.$name.forward(*wrong)
'''

TEST_OTHERS_PY = '''


@pytest.mark.parametrize("name", [$others_list])
def test_rejects_mismatched_tensor(op, device, name):
    """Every tensor has the first one's dtype and shape (the placeholder's checks)."""
    i = reference.TENSORS.index(name)
    args = arguments(device, torch.float32)
    wrong = list(args)
    wrong[i] = args[i].double()
    message = f"$name.forward: {name} has dtype Double but $first has dtype Float"
    with pytest.raises(RuntimeError, match=message):
        torch.ops.$name.forward(*wrong)
    wrong[i] = args[i][:3]
    message = rf"$name.forward: {name} must have the shape of $first \\[64, 32\\], got \\[3, 32\\]"
    with pytest.raises(RuntimeError, match=message):
        torch.ops.$name.forward(*wrong)
'''

TEST_CUDA_PY = '''

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
def test_rejects_mismatched_devices(op):
    args = arguments("cuda", torch.float32)
    with pytest.raises(RuntimeError, match="$name.backward: grad is on cpu but $first is on cuda:0"):
        torch.ops.$name.backward(torch.ones(64, 32), *args)
    for name in reference.TENSORS[1:]:
        i = reference.TENSORS.index(name)
        wrong = list(args)
        wrong[i] = args[i].cpu()
        with pytest.raises(RuntimeError, match=f"$name.forward: {name} is on cpu but $first is on cuda:0"):
            torch.ops.$name.forward(*wrong)
'''
