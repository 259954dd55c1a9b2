"""``python -m jit_loader new NAME``: a new op folder in the project's op anatomy.

The generated op is small but complete, so that it builds and its tests pass before a
line of it is changed: ``y = x * |x|`` (a signed square, whose gradient ``2 |x|``
depends on the input) with a CPU kernel, optionally a CUDA kernel, the Python surface
with its fake kernels and autograd, a plain-PyTorch reference and a test file. One
replaces the math in ``<name>.h`` and the reference, then grows the rest.

The host side (``<name>.cpp``, ``<name>_host.h``, ``<name>_cuda.cpp``) is written
against the LibTorch stable ABI by default (``STABLE_TORCH_LIBRARY``, ``TORCH_BOX``,
``STD_TORCH_CHECK``, the headeronly dispatch): it rebuilds fastest and loads in later torch
releases. ``--aten`` writes it against ATen instead, for the full API and C++ autograd.
The math header, the torch-free ``.cu``, the Python surface, the reference and the tests
are the same for both. With a schema (``new NAME --aten --schema "NAME(Tensor x, Tensor
weight, float eps) -> Tensor"``) the ATen files of jit_tools/tools/scaffold_schema.py, written
from its arguments, take the place of these; the stable templates take no schema.

Where the files go: the op folder ``<dir>/<name>/``. When ``<dir>`` is a folder named
``ops`` beside a ``tests`` folder (this repository's layout), the test file goes to
``tests/test_<name>.py``; anywhere else it goes into the op folder, with a
``conftest.py`` that registers the ``cuda`` marker. Nothing is ever overwritten.
"""

from __future__ import annotations

import keyword
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path

from jit_tools.errors import JitLoaderError
from jit_tools.tools import op_schema, scaffold_schema


class ScaffoldError(JitLoaderError, ValueError):
    """The op cannot be scaffolded (bad name, existing files)."""


_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")

# Words a C++ compiler rejects as a namespace or function name.
CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast
continue co_await co_return co_yield decltype default delete do double dynamic_cast else
enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid
typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())

# Dispatcher namespaces and folder names that are taken: torch's own libraries, and
# names the loader treats specially (ops/common holds shared headers).
RESERVED = frozenset({"aten", "prim", "prims", "torch", "c10", "at", "std", "cuda", "common",
                      "ops", "quantized", "_test", "jit_loader", "jit_tools"})


def validate_name(name: str) -> None:
    """Raise :class:`ScaffoldError` naming ``name`` unless it can be the op's folder,
    Python module, C++ namespace and dispatcher namespace all at once."""
    why = None
    if not _NAME_RE.match(name):
        why = ("must start with a letter and hold only ASCII letters, digits and "
               "underscores (it names a C++ namespace and a Python module)")
    elif "__" in name:
        why = "must not contain a double underscore (reserved in C++ identifiers)"
    elif keyword.iskeyword(name):
        why = "is a Python keyword"
    elif name in CPP_KEYWORDS:
        why = "is a C++ keyword"
    elif name in RESERVED:
        why = "is taken (a torch or C++ namespace, or a name the loader uses itself)"
    elif name.lower().startswith("test"):
        why = "must not start with 'test' (pytest would collect the op's own module as a test)"
    if why:
        raise ScaffoldError(f"invalid op name {name!r}: it {why}")


def default_dir(cwd: Path | None = None) -> Path:
    """``./ops`` when the current folder has one (the root of this repository or a
    project laid out like it), else the current folder."""
    cwd = Path.cwd() if cwd is None else cwd
    return cwd / "ops" if (cwd / "ops").is_dir() else cwd


def class_name(name: str) -> str:
    """``my_op`` -> ``MyOp``: the nn.Module of the surface (never equal to the function)."""
    camel = "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
    return camel if camel != name else camel + "Module"


@dataclass(frozen=True)
class Plan:
    name: str
    op_dir: Path
    files: dict[Path, str]     # path -> text, in writing order

    @property
    def test_file(self) -> Path:
        return next(p for p in self.files if p.name == f"test_{self.name}.py")


def plan(name: str, directory: str | os.PathLike | None = None, cuda: bool = False,
         schema: str | None = None, aten: bool = False) -> Plan:
    """The files ``new`` writes, without writing them; raises :class:`ScaffoldError`
    for a bad name or schema, or when any of them exists already. The host side is on
    the stable ABI, or on ATen with ``aten``. Without ``schema`` the op is ``y = f(x)``;
    with one (``"NAME(Tensor x, Tensor weight, float eps) -> Tensor"``, ATen only) every
    file follows its arguments (jit_tools/tools/scaffold_schema.py)."""
    validate_name(name)
    parsed = None
    if schema is not None and not aten:
        raise ScaffoldError("--schema writes an ATen op; add --aten "
                            f"(python -m jit_loader new {name} --aten --schema \"...\")")
    if schema is not None:
        try:
            parsed = op_schema.parse_schema(schema, name)
        except op_schema.SchemaError as e:
            raise ScaffoldError(f"--schema: {e}") from None
    base = (Path(directory).expanduser() if directory is not None else default_dir()).resolve()
    if base.exists() and not base.is_dir():
        raise ScaffoldError(f"--dir {str(base)!r} is a file, not a folder")
    op_dir = base / name
    if op_dir.exists() or op_dir.is_symlink():
        raise ScaffoldError(f"{op_dir} already exists; refusing to overwrite it "
                            "(choose another name or --dir, or remove that folder)")
    in_repo_layout = base.name == "ops" and (base.parent / "tests").is_dir()
    test_path = base.parent / "tests" / f"test_{name}.py" if in_repo_layout else op_dir / f"test_{name}.py"
    if test_path.exists():
        raise ScaffoldError(f"{test_path} already exists; refusing to overwrite it "
                            "(choose another name, or remove that file)")
    fields = dict(
        name=name, Class=class_name(name),
        op_dir_expr=(f'Path(__file__).resolve().parents[1] / "ops" / "{name}"' if in_repo_layout
                     else "Path(__file__).resolve().parent"),
        devices=(CUDA_DEVICES if cuda else 'DEVICES = ["cpu"]  # the op has no CUDA kernel'),
        devices_note=" on CPU and CUDA" if cuda else " on CPU",
    )
    if parsed is None:
        host_h, cpu_cpp, cuda_cpp = (HOST_H, CPU_CPP, CUDA_CPP) if aten else (
            STABLE_HOST_H, STABLE_CPU_CPP, STABLE_CUDA_CPP)
        templates = [
            (f"{name}.h", MATH_H), (f"{name}_host.h", host_h), (f"{name}.cpp", cpu_cpp),
        ]
        if cuda:
            templates += [(f"{name}_cuda.h", CUDA_H), (f"{name}_cuda.cu", CUDA_CU),
                          (f"{name}_cuda.cpp", cuda_cpp)]
        templates += [(f"{name}.py", SURFACE_PY), ("reference.py", REFERENCE_PY), ("__init__.py", INIT_PY)]
        test = TEST_PY + (TEST_CUDA_PY if cuda else "")
    else:
        fields.update(scaffold_schema.fields(parsed))
        templates = [(string.Template(f).substitute(name=name), t)
                     for f, t in scaffold_schema.templates(cuda)]
        test = (scaffold_schema.TEST_PY + (scaffold_schema.TEST_OTHERS_PY if len(parsed.tensors) > 1 else "")
                + (scaffold_schema.TEST_CUDA_PY if cuda else ""))
    files = {op_dir / fname: string.Template(text).substitute(fields) for fname, text in templates}
    if not in_repo_layout:
        files[op_dir / "conftest.py"] = CONFTEST_PY
    files[test_path] = string.Template(test).substitute(fields)
    return Plan(name=name, op_dir=op_dir, files=files)


def create(name: str, directory: str | os.PathLike | None = None, cuda: bool = False,
           schema: str | None = None, aten: bool = False) -> Plan:
    """Write the op folder (and its test file); returns what was written."""
    p = plan(name, directory, cuda, schema, aten)
    p.op_dir.parent.mkdir(parents=True, exist_ok=True)
    p.op_dir.mkdir()  # fails, rather than merge, if it appeared since plan()
    for path, text in p.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:  # "x": never overwrite
            f.write(text)
    return p


# --------------------------------------------------------------------------------------
# Templates: string.Template, so C++ braces need no escaping; the fields of plan()
# ($name, $Class, ...) are filled in and $$ would be a dollar.
# --------------------------------------------------------------------------------------

MATH_H = """\
#pragma once
// $name's math, shared by the CPU loop and the CUDA kernels (torch-free, so the .cu
// that includes it compiles in about a second). Called with the accumulation type:
// float for half and bfloat16 storage, else the storage type.
#include "common/host_device.h"

namespace ${name}_op {

// y = x * |x|, a signed square.
template <typename T>
OPS_HOST_DEVICE T forward(T x) {
  return x < T(0) ? -x * x : x * x;
}

// dy/dx = 2 |x|; the backward takes the forward's input x.
template <typename T>
OPS_HOST_DEVICE T backward(T grad, T x) {
  return grad * T(2) * (x < T(0) ? -x : x);
}

}  // namespace ${name}_op
"""

HOST_H = """\
#pragma once
// $name: argument checks shared by the CPU and CUDA backends (host only). Each error
// names the op, the argument and the bad value.
#include <ATen/ATen.h>

#include "common/checks.h"

namespace ${name}_op {

inline void check_forward(const at::Tensor& x) {
  OP_CHECK_FLOATING("$name.forward", "x", x);
}

inline void check_backward(const at::Tensor& grad, const at::Tensor& x) {
  OP_CHECK_FLOATING("$name.backward", "x", x);
  OP_CHECK_SAME_DEVICE("$name.backward", "grad", grad, "x", x);
  OP_CHECK_SAME_DTYPE("$name.backward", "grad", grad, "x", x);
  TORCH_CHECK(grad.sizes() == x.sizes(), "$name.backward: grad has shape ", grad.sizes(),
              " but x has shape ", x.sizes());
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

#include "${name}.h"
#include "${name}_host.h"

namespace {

// Elements per parallel task: below this, waking threads costs more than it saves.
constexpr int64_t kGrain = 32768;

at::Tensor forward_cpu(const at::Tensor& x) {
  ${name}_op::check_forward(x);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(xc.sizes(), xc.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "$name.forward", [&] {
    using acc = at::opmath_type<scalar_t>;
    const scalar_t* in = xc.const_data_ptr<scalar_t>();
    scalar_t* out = y.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, xc.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = static_cast<scalar_t>(${name}_op::forward(static_cast<acc>(in[i])));
      }
    });
  });
  return y;
}

at::Tensor backward_cpu(const at::Tensor& grad, const at::Tensor& x) {
  ${name}_op::check_backward(grad, x);
  const at::Tensor gc = grad.contiguous();
  const at::Tensor xc = x.contiguous();
  at::Tensor dx = at::empty(xc.sizes(), xc.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "$name.backward", [&] {
    using acc = at::opmath_type<scalar_t>;
    const scalar_t* g = gc.const_data_ptr<scalar_t>();
    const scalar_t* in = xc.const_data_ptr<scalar_t>();
    scalar_t* out = dx.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, xc.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = static_cast<scalar_t>(
            ${name}_op::backward(static_cast<acc>(g[i]), static_cast<acc>(in[i])));
      }
    });
  });
  return dx;
}

}  // namespace

TORCH_LIBRARY($name, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL($name, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("backward", &backward_cpu);
}
"""

CUDA_H = """\
#pragma once
// $name: launchers of the CUDA kernels in ${name}_cuda.cu (torch-free). T is float,
// double, ops_common::half_t or bfloat16_t (common/cuda_types.h); buffers are contiguous with n elements. Each returns
// cudaGetLastError() after its launch.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/cuda_types.h"

namespace ${name}_op {

template <typename T>
cudaError_t launch_forward(const T* x, T* y, int64_t n, cudaStream_t stream);

template <typename T>
cudaError_t launch_backward(const T* grad, const T* x, T* dx, int64_t n, cudaStream_t stream);

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

constexpr int kThreads = 256;

template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));
  }
}

template <typename T>
__global__ void backward_kernel(const T* __restrict__ grad, const T* __restrict__ x,
                                T* __restrict__ dx, int64_t n) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dx[i] = ops_common::from_acc<T>(backward(ops_common::to_acc(grad[i]), ops_common::to_acc(x[i])));
  }
}

#if !defined(__CUDACC_RTC__)  // host code: nvcc only, NVRTC compiles the kernels alone
// As many blocks as the device holds at once; the grid-stride loop covers the rest.
unsigned int blocks_for(int64_t n) {
  return ops_common::grid_size(
      n, kThreads, ops_common::resident_blocks(ops_common::blocks_per_sm_by_threads(kThreads)));
}
#endif

}  // namespace

#if !defined(__CUDACC_RTC__)
template <typename T>
cudaError_t launch_forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ops_common::launch(forward_kernel<T>, blocks_for(n), kThreads, 0, stream, x, y, n);
}

template <typename T>
cudaError_t launch_backward(const T* grad, const T* x, T* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ops_common::launch(backward_kernel<T>, blocks_for(n), kThreads, 0, stream, grad, x, dx, n);
}

#define ${name}_INSTANTIATE(T)                                                          \\
  template cudaError_t launch_forward<T>(const T*, T*, int64_t, cudaStream_t);          \\
  template cudaError_t launch_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t);

${name}_INSTANTIATE(float)
${name}_INSTANTIATE(double)
${name}_INSTANTIATE(ops_common::half_t)
${name}_INSTANTIATE(ops_common::bfloat16_t)
#endif  // !defined(__CUDACC_RTC__)

}  // namespace ${name}_op
"""

CUDA_CPP = """\
// $name: CUDA host side (checks, device guard, current stream, dtype dispatch,
// allocation) around the torch-free launchers of ${name}_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "common/cuda_host.h"
#include "${name}_cuda.h"
#include "${name}_host.h"

namespace {

using ops_common::cuda_ptr;
using ops_common::cuda_t;

at::Tensor forward_cuda(const at::Tensor& x) {
  ${name}_op::check_forward(x);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(xc.sizes(), xc.options());
  if (y.numel() == 0) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "$name.forward", [&] {
    OPS_CHECK_LAUNCH(${name}_op::launch_forward<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(xc), cuda_ptr<scalar_t>(y), xc.numel(), ops_common::current_stream()));
  });
  return y;
}

at::Tensor backward_cuda(const at::Tensor& grad, const at::Tensor& x) {
  ${name}_op::check_backward(grad, x);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor gc = grad.contiguous();
  const at::Tensor xc = x.contiguous();
  at::Tensor dx = at::empty(xc.sizes(), xc.options());
  if (dx.numel() == 0) return dx;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "$name.backward", [&] {
    OPS_CHECK_LAUNCH(${name}_op::launch_backward<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(gc), cuda_ptr<scalar_t>(xc), cuda_ptr<scalar_t>(dx), xc.numel(),
        ops_common::current_stream()));
  });
  return dx;
}

}  // namespace

TORCH_LIBRARY_IMPL($name, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}
"""

STABLE_HOST_H = """\
#pragma once
// $name: argument checks shared by the CPU and CUDA backends (host only). Each error
// names the op, the argument and the bad value.
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include "common/stable_checks.h"

namespace ${name}_op {

using torch::stable::Tensor;

inline void check_forward(const Tensor& x) {
  OP_CHECK_FLOATING("$name.forward", "x", x);
}

inline void check_backward(const Tensor& grad, const Tensor& x) {
  OP_CHECK_FLOATING("$name.backward", "x", x);
  OP_CHECK_SAME_DEVICE("$name.backward", "grad", grad, "x", x);
  OP_CHECK_SAME_DTYPE("$name.backward", "grad", grad, "x", x);
  STD_TORCH_CHECK(grad.sizes().equals(x.sizes()), "$name.backward: grad has shape ",
                  ops_common::shape_of(grad), " but x has shape ", ops_common::shape_of(x));
}

}  // namespace ${name}_op
"""

STABLE_CPU_CPP = """\
// $name: schema and CPU kernels, on the LibTorch stable ABI: the library loads unchanged
// in later torch releases (`python -m jit_loader new NAME --aten` writes an ATen op, for
// the full API or C++ autograd). The math is in $name.h, the checks in ${name}_host.h.
// Inputs of any layout are made contiguous; outputs are contiguous.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "common/stable_ops.h"
#include "${name}.h"
#include "${name}_host.h"

namespace {

using torch::stable::Tensor;

// Elements per parallel task: below this, waking threads costs more than it saves.
constexpr int64_t kGrain = 32768;

Tensor forward_cpu(const Tensor& x) {
  ${name}_op::check_forward(x);
  const Tensor xc = torch::stable::contiguous(x);
  Tensor y = torch::stable::empty_like(xc);
  OPS_DISPATCH_FLOATING(xc.scalar_type(), "$name.forward", [&] {
    using acc = ops_common::opmath_t<scalar_t>;
    const scalar_t* in = xc.const_data_ptr<scalar_t>();
    scalar_t* out = y.mutable_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, xc.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = static_cast<scalar_t>(${name}_op::forward(static_cast<acc>(in[i])));
      }
    });
  });
  return y;
}

Tensor backward_cpu(const Tensor& grad, const Tensor& x) {
  ${name}_op::check_backward(grad, x);
  const Tensor gc = torch::stable::contiguous(grad);
  const Tensor xc = torch::stable::contiguous(x);
  Tensor dx = torch::stable::empty_like(xc);
  OPS_DISPATCH_FLOATING(xc.scalar_type(), "$name.backward", [&] {
    using acc = ops_common::opmath_t<scalar_t>;
    const scalar_t* g = gc.const_data_ptr<scalar_t>();
    const scalar_t* in = xc.const_data_ptr<scalar_t>();
    scalar_t* out = dx.mutable_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, xc.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = static_cast<scalar_t>(
            ${name}_op::backward(static_cast<acc>(g[i]), static_cast<acc>(in[i])));
      }
    });
  });
  return dx;
}

}  // namespace

STABLE_TORCH_LIBRARY($name, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL($name, CPU, m) {
  m.impl("forward", TORCH_BOX(&forward_cpu));
  m.impl("backward", TORCH_BOX(&backward_cpu));
}
"""

STABLE_CUDA_CPP = """\
// $name: CUDA host side on the stable ABI (checks, device guard, current stream, dtype
// dispatch, allocation) around the torch-free launchers of ${name}_cuda.cu.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "common/stable_cuda_host.h"
#include "common/stable_ops.h"
#include "${name}_cuda.h"
#include "${name}_host.h"

namespace {

using ops_common::cuda_ptr;
using ops_common::cuda_t;
using torch::stable::Tensor;

Tensor forward_cuda(const Tensor& x) {
  ${name}_op::check_forward(x);
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor xc = torch::stable::contiguous(x);
  Tensor y = torch::stable::empty_like(xc);
  if (y.numel() == 0) return y;
  OPS_DISPATCH_FLOATING(xc.scalar_type(), "$name.forward", [&] {
    OPS_CHECK_LAUNCH(${name}_op::launch_forward<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(xc), cuda_ptr<scalar_t>(y), xc.numel(), ops_common::current_stream(xc)));
  });
  return y;
}

Tensor backward_cuda(const Tensor& grad, const Tensor& x) {
  ${name}_op::check_backward(grad, x);
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor gc = torch::stable::contiguous(grad);
  const Tensor xc = torch::stable::contiguous(x);
  Tensor dx = torch::stable::empty_like(xc);
  if (dx.numel() == 0) return dx;
  OPS_DISPATCH_FLOATING(xc.scalar_type(), "$name.backward", [&] {
    OPS_CHECK_LAUNCH(${name}_op::launch_backward<cuda_t<scalar_t>>(
        cuda_ptr<scalar_t>(gc), cuda_ptr<scalar_t>(xc), cuda_ptr<scalar_t>(dx), xc.numel(),
        ops_common::current_stream(xc)));
  });
  return dx;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL($name, CUDA, m) {
  m.impl("forward", TORCH_BOX(&forward_cuda));
  m.impl("backward", TORCH_BOX(&backward_cuda));
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


def _check_floating(op: str, name: str, t: torch.Tensor) -> None:
    torch._check(t.is_floating_point(),
                 lambda: f"{op}: {name} must be a floating-point tensor, got {t.dtype}")


# Fake kernels: output shape and dtype without computing, for torch.compile and export.
@torch.library.register_fake("$name::forward", lib=LIB)
def _forward_fake(x):
    _check_floating("$name.forward", "x", x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("$name::backward", lib=LIB)
def _backward_fake(grad, x):
    op = "$name.backward"
    jit_loader.check_same_device(op, x=x, grad=grad)
    _check_floating(op, "x", x)
    torch._check(grad.dtype == x.dtype,
                 lambda: f"{op}: grad has dtype {grad.dtype} but x has dtype {x.dtype}")
    torch._check(grad.shape == x.shape,
                 lambda: f"{op}: grad has shape {list(grad.shape)} but x has shape {list(x.shape)}")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# Autograd: the backward op of the incoming gradient and x. The loader's C++ autograd
# kernel serves it where that is built (no Python per call), register_autograd elsewhere.
jit_loader.register_autograd_op("$name::forward", "$name::backward", ["grad", "x"], lib=LIB)


def $name(x: torch.Tensor) -> torch.Tensor:
    """``x * |x|``, differentiable."""
    return torch.ops.$name.forward(x)


class $Class(torch.nn.Module):
    """``$name`` as a module."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return $name(x)
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
    torch.float32: dict(atol=1e-6, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=8e-3, rtol=8e-3),
}


def ${name}_reference(x: torch.Tensor) -> torch.Tensor:
    """y = x * |x|."""
    return x * x.abs()


def ${name}_backward_reference(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dy/dx = 2 |x|, from the forward's input x."""
    return grad * 2 * x.abs()


def example_inputs(device="cpu", dtype=torch.float32, numel: int = 4096) -> torch.Tensor:
    """Fresh random input, both signs."""
    x = torch.randn(numel, device=device, dtype=torch.float32) * 2
    return x.to(dtype).requires_grad_()


def check_cases(device="cpu") -> dict[str, dict]:
    """What every check of the op runs (``jit_loader.check_op``): the op on fresh random
    inputs against the reference evaluated in float64 on the same values, in float32 and
    float64, plus bfloat16 on CUDA, within TOLERANCES; gradcheck, opcheck, torch.compile.
    Each case is jit_loader.check's arguments, ``fn`` naming the surface function."""
    dtypes = (torch.float32, torch.float64)
    if torch.device(device).type == "cuda":
        dtypes += (torch.bfloat16,)
    return {"$name": dict(fn="$name", inputs=(example_inputs(device, torch.float64),),
                         reference=${name}_reference, dtypes=dtypes, reference_dtype=torch.float64)}
'''

INIT_PY = '''\
"""$name: y = x * |x| forward and its backward (from the saved input)$devices_note.

Load with ``jit_loader.load(<this folder>)`` (or by name when it sits in ops/);
``reference.py`` holds the plain-PyTorch reference, importable without building anything.
"""
'''

CUDA_DEVICES = """\
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")])]"""

CONFTEST_PY = '''\
"""Registers the ``cuda`` marker of the op's tests (tests marked with it are skipped
where no GPU is visible; ``pytest -m cuda`` selects them)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped where none is visible)")
'''

TEST_PY = '''\
"""The $name op, specified as tests: y = x * |x| forward and dx = 2 |x| grad backward,
on every device and floating dtype, for any shape and layout, against the float64
reference in reference.py on fresh random inputs. CUDA cases are marked ``cuda`` and
skipped where no GPU is visible.
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


def random_input(shape, device, dtype):
    return (torch.randn(shape, device=device) * 2).to(dtype)


def assert_matches(got, want, dtype):
    assert got.dtype == dtype
    assert got.shape == want.shape
    torch.testing.assert_close(got.double(), want.double(), **reference.TOLERANCES[dtype])


def layouts(device, dtype):
    """Contiguous, non-contiguous views and an empty tensor."""
    base = random_input((64, 48), device, dtype)
    return {
        "contiguous": base,
        "transposed": base.t(),
        "step_slice": base[:, ::3],
        "storage_offset": base.flatten()[1:],
        "expanded": base[:1].expand(5, 48),
        "scalar": random_input((), device, dtype),
        "empty": random_input((4, 0, 3), device, dtype),
    }


LAYOUTS = ["contiguous", "transposed", "step_slice", "storage_offset", "expanded", "scalar", "empty"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_forward_matches_reference(op, device, dtype, layout):
    x = layouts(device, dtype)[layout]
    before = x.clone()
    assert_matches(op.$name(x), reference.${name}_reference(x.double()), dtype)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_backward_matches_reference(op, device, dtype, layout):
    x = layouts(device, dtype)[layout].requires_grad_()
    grad = torch.randn_like(x)
    op.$name(x).backward(grad)
    want = reference.${name}_backward_reference(grad.double(), x.detach().double())
    assert_matches(x.grad, want, dtype)
    strided_grad = layouts(device, dtype)[layout]
    assert_matches(torch.ops.$name.backward(strided_grad, x.detach()),
                   reference.${name}_backward_reference(strided_grad.double(), x.detach().double()), dtype)


def test_gradcheck(op, device):
    x = random_input((5, 7), device, torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(op.$name, (x,))
    assert torch.autograd.gradcheck(op.$Class(), (x,))


def test_opcheck(op, device):
    x = random_input((3, 17), device, torch.float32).requires_grad_()
    torch.library.opcheck(torch.ops.$name.forward.default, (x,))
    torch.library.opcheck(torch.ops.$name.backward.default, (torch.randn_like(x), x.detach()))


def test_compile_fullgraph(op):
    fn = op.$name  # resolve the Op handle outside the traced function

    def f(x):
        return fn(x * 2) + 1

    torch.compiler.reset()
    compiled = torch.compile(f, fullgraph=True)
    x = random_input((8, 33), "cpu", torch.float32).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    y = compiled(x)
    y.sum().backward()
    y_eager = f(x_eager)
    y_eager.sum().backward()
    torch.testing.assert_close(y, y_eager)
    torch.testing.assert_close(x.grad, x_eager.grad)


def test_check(op, device):
    """jit_loader.check over reference.check_cases: the reference, gradcheck, opcheck, compile."""
    results = jit_loader.check_op(op, device, verbose=False)
    assert results and all(results), [r.table() for r in results if not r]


@pytest.mark.parametrize("dtype, dtype_name", [(torch.int64, "Long"), (torch.bool, "Bool")])
def test_rejects_non_floating_input(op, device, dtype, dtype_name):
    x = torch.ones(4, device=device, dtype=dtype)
    message = f"x must be a floating-point tensor, got {dtype_name}"
    with pytest.raises(RuntimeError, match=f"$name.forward: {message}"):
        torch.ops.$name.forward(x)
    with pytest.raises(RuntimeError, match=f"$name.backward: {message}"):
        torch.ops.$name.backward(x, x)


def test_fake_kernel_rejects_meta_mixed_with_cpu(op):
    """One argument on meta runs the fake kernel, which names the device mismatch."""
    with pytest.raises(RuntimeError, match="$name.backward: grad is on meta but x is on cpu"):
        torch.ops.$name.backward(torch.ones(4, device="meta"), torch.randn(4))


def test_backward_rejects_mismatched_grad(op, device):
    x = torch.randn(4, device=device)
    with pytest.raises(RuntimeError, match=r"$name.backward: grad has shape \\[3\\] but x has shape \\[4\\]"):
        torch.ops.$name.backward(torch.ones(3, device=device), x)
    with pytest.raises(RuntimeError, match="$name.backward: grad has dtype Double but x has dtype Float"):
        torch.ops.$name.backward(torch.ones(4, device=device, dtype=torch.float64), x)
'''

TEST_CUDA_PY = '''

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
def test_backward_rejects_mismatched_devices(op):
    x = torch.randn(4, device="cuda")
    with pytest.raises(RuntimeError, match="$name.backward: grad is on cpu but x is on cuda:0"):
        torch.ops.$name.backward(torch.ones(4), x)
'''
