"""jit_tools.swap.nvrtc: an op's device code compiled with NVRTC, one instantiation at a time.

No GPU is needed (NVRTC compiles, nothing runs), so CI runs these: every bundled op's
kernels compile through NVRTC for sm_90, each kernel template in at least one
instantiation, into the very symbols nvcc gave them; an error names the user's .cu and
line; the same inputs compile once.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import jit_loader
from jit_tools import key as keys, sources
from jit_tools.builder import ninja_file
from jit_tools.errors import BuildError, JitLoaderError
from jit_tools.swap import nvrtc, nvrtc_options
from jit_tools.tools import scaffold

CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None
# Where .cu files build (nvcc and a CUDA torch) NVRTC must be there too: torch's CUDA
# wheels ship it. A missing NVRTC fails these tests rather than skipping them.
needs_cuda_build = pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
CUDA_OPS = [op for op in jit_loader.available_ops()
            if any((sources.OPS_DIR / op).glob("*.cu"))]
ARCH = "9.0"


def one_instantiation_per_kernel(mangled: list[str]) -> dict[str, str]:
    """name expression -> mangled name, for the first instantiation of each kernel."""
    chosen: dict[str, tuple[str, str]] = {}
    for m in mangled:
        expr = nvrtc.name_expression(m)
        chosen.setdefault(expr.split("<")[0], (expr, m))
    return dict(chosen.values())


def unnamed_namespace_free(mangled: str) -> str:
    """The mangled name with its unnamed namespace's name (<length>_GLOBAL__N_...) left out."""
    m = re.search(r"(\d+)(_GLOBAL__N_)", mangled)
    if m is None:
        return mangled
    return mangled[:m.start()] + "<unnamed>" + mangled[m.start(2) + int(m.group(1)):]


def test_nvcc_flags_become_nvrtc_options():
    options, unknown = nvrtc_options.translate_nvcc_flags(
        ["-O1", "-lineinfo", "-DNDEBUG", "-isystem", "/x/include", "-I/y", "--use_fast_math",
         "-maxrregcount=64", "--expt-relaxed-constexpr", "-std=c++20", "--threads", "2",
         "-Xcompiler", "-fno-fast-math", "--weird-flag"])
    assert options == ["-lineinfo", "-DNDEBUG", "-I/x/include", "-I/y", "--use_fast_math",
                       "--maxrregcount=64", "-default-device", "-std=c++20"]
    assert unknown == ["--weird-flag"]


def test_arch_list_entries_become_nvrtc_targets():
    assert nvrtc_options.arch_option("9.0") == "--gpu-architecture=sm_90"
    assert nvrtc_options.arch_option("9.0a") == "--gpu-architecture=sm_90a"
    assert nvrtc_options.arch_option("8.0+PTX") == "--gpu-architecture=compute_80"
    assert nvrtc_options.first_arch("8.0;9.0+PTX") == "9.0"
    with pytest.raises(JitLoaderError, match="not of the form"):
        nvrtc_options.arch_option("sm90")


@needs_cuda_build
def test_torch_nvcc_flags_are_those_of_the_ninja_build(tmp_path):
    op_dir = sources.OPS_DIR / "sigmoid"
    cu = op_dir / "sigmoid_cuda.cu"
    cfg = keys.config("sigmoid", op_dir, {}, [cu])
    line = " ".join(ninja_file.torch_flags("sigmoid", cfg, [cu], tmp_path).cuda_cflags)
    flags = line.split()
    for flag in nvrtc_options.TORCH_NVCC_FLAGS:
        assert flag in flags, (flag, line)
    stds = [f for f in flags if f.startswith("-std=")]
    assert stds and nvrtc_options.torch_cxx_std() == stds[-1], (stds, line)


@needs_cuda_build
@pytest.mark.parametrize("name", CUDA_OPS)
def test_every_kernel_of_an_op_compiles_through_nvrtc(name, tmp_path):
    op = jit_loader.load(name)
    mangled = nvrtc.library_kernels(op.library)
    assert mangled, f"{name}: no kernel found in {op.library}"
    chosen = one_instantiation_per_kernel(mangled)
    (cu,) = sorted(op.path.glob("*.cu"))
    kernels = nvrtc.compile_for_op(name, op.path, cu, list(chosen), arch=ARCH,
                                   cache_dir=tmp_path)
    assert kernels.kind == "cubin" and kernels.image[:4] == b"\x7fELF"
    # NVRTC's symbol of each instantiation is the one nvcc's build launches, but for the
    # id of the file's unnamed namespace (nvcc: a hash of its module id; NVRTC: zeros).
    assert {k: unnamed_namespace_free(v) for k, v in kernels.lowered.items()} == {
        k: unnamed_namespace_free(v) for k, v in chosen.items()}


@needs_cuda_build
def test_an_nvrtc_error_names_the_users_file_and_line(tmp_path):
    op_dir = tmp_path / "sigmoid"
    shutil.copytree(sources.OPS_DIR / "sigmoid", op_dir)
    cu = op_dir / "sigmoid_cuda.cu"
    lines = cu.read_text().splitlines()
    lines.insert(5, "__device__ float broken(float x) { return x + undeclared_value; }")
    cu.write_text("\n".join(lines) + "\n")
    name = "ops_common::elementwise_kernel<4, 2, ops_common::PointwiseApply<sigmoid_op::Forward, float>, float, 1>"
    with pytest.raises(BuildError) as info:
        nvrtc.compile_for_op("sigmoid", op_dir, cu, [name], arch=ARCH, cache_dir=tmp_path / "c")
    first = str(info.value).splitlines()[0]
    assert re.fullmatch(rf"{re.escape(str(cu))}:6: identifier \"undeclared_value\" is undefined", first), first
    assert info.value.file == str(cu) and info.value.line == 6
    assert Path(info.value.log_path).is_file()


@needs_cuda_build
def test_unchanged_inputs_compile_once_and_a_header_edit_compiles_again(tmp_path, nvrtc_logs):
    op_dir = tmp_path / "gelu"
    shutil.copytree(sources.OPS_DIR / "gelu", op_dir)
    cu = op_dir / "gelu_cuda.cu"
    name = "ops_common::elementwise_kernel<4, 2, ops_common::PointwiseApply<gelu_op::Forward, float>, float, 1>"
    runs = nvrtc_logs  # one per NVRTC call

    def compile_once():
        return nvrtc.compile_for_op("gelu", op_dir, cu, [name], arch=ARCH, cache_dir=tmp_path / "c")

    first = compile_once()
    assert not first.cached and len(runs) == 1
    again = compile_once()
    assert again.cached and again.image == first.image and again.lowered == first.lowered
    assert len(runs) == 1  # no NVRTC call
    header = op_dir / "gelu.h"
    header.write_text(header.read_text() + "\n// an edit\n")
    assert not compile_once().cached and len(runs) == 2


def test_nvcc_flags_nvrtc_cannot_take_are_refused(tmp_path):
    if nvrtc.why_unavailable():
        pytest.skip(nvrtc.why_unavailable())
    with pytest.raises(JitLoaderError, match="--weird-flag"):
        nvrtc.compile_kernels(sources.OPS_DIR / "gelu" / "gelu_cuda.cu", [], arch=ARCH,
                              cache_dir=tmp_path, include_dirs=[], nvcc_flags=["--weird-flag"])


# Every kernel of every scaffold kind, one instantiation each (the .cu is the same for both ABIs).
SCAFFOLD_KERNELS = {
    "elementwise": ["forward_kernel<float>", "backward_kernel<ops_common::half_t>"],
    "rowwise": ["forward_kernel<float>", "backward_x_kernel<ops_common::bfloat16_t>",
                "weight_partials_kernel<double>", "sum_partials_kernel<ops_common::half_t>"],
}


@needs_cuda_build
@pytest.mark.parametrize("kind", list(SCAFFOLD_KERNELS))
def test_a_scaffolded_op_compiles_through_nvrtc(tmp_path, kind):
    """Every op the scaffold makes swaps a kernel edit: its kernels compile with NVRTC."""
    plan = scaffold.create("probe_rtc", tmp_path, cuda=True, kind=kind,
                           schema="probe_rtc(Tensor x, Tensor w, float a) -> Tensor"
                           if kind == "elementwise" else None)
    cu = plan.op_dir / "probe_rtc_cuda.cu"
    names = [f"probe_rtc_op::{k}" for k in SCAFFOLD_KERNELS[kind]]
    kernels = nvrtc.compile_for_op("probe_rtc", plan.op_dir, cu, names, arch=ARCH,
                                   cache_dir=tmp_path / "c")
    assert set(kernels.lowered) == set(names)
    assert "14forward_kernelIfE" in kernels.lowered[names[0]]


PROBE_SOURCE = ('#include "probe.h"\n#include <type_traits>\n'
                'extern "C" __global__ void probe_kernel(float* y) { y[0] = PROBE_SCALE * 3.0f; }\n')


def _probe_compile(folder: Path, cache: Path) -> nvrtc.Kernels:
    return nvrtc.compile_kernels(folder / "probe.cu", ["probe_kernel"], arch=ARCH, cache_dir=cache,
                                 include_dirs=[folder])


@needs_cuda_build
def test_the_precompiled_header_gives_the_same_kernels_and_follows_header_edits(tmp_path, monkeypatch):
    """NVRTC reuses an automatic precompiled header without looking at its headers again:
    the loader's must give the kernels a compile without one gives, also after an edit of
    a header inside the source's include block."""
    if not nvrtc.pch_enabled():
        pytest.skip(f"NVRTC {nvrtc.version()} makes no precompiled headers")
    (tmp_path / "probe.cu").write_text(PROBE_SOURCE)
    header = tmp_path / "probe.h"

    def plain(cache: str) -> bytes:
        with monkeypatch.context() as m:
            m.setenv("JIT_LOADER_NVRTC_PCH", "0")
            return _probe_compile(tmp_path, tmp_path / cache).image

    images = []
    for scale in ("1.0f", "2.0f"):
        header.write_text(f"#pragma once\n#define PROBE_SCALE {scale}\n")
        made = _probe_compile(tmp_path, tmp_path / f"made-{scale}")
        used = _probe_compile(tmp_path, tmp_path / f"used-{scale}")
        assert not made.cached and not used.cached
        assert made.image == used.image == plain(f"plain-{scale}"), scale
        assert "precompiled header" not in made.log + used.log
        images.append(made.image)
    assert images[0] != images[1]
    assert len(list(nvrtc._PCH_ROOT[0].glob("*/*.pch"))) >= 2


@needs_cuda_build
def test_warming_makes_the_header_the_first_kernel_edit_uses(tmp_path, request):
    if not nvrtc.pch_enabled():
        pytest.skip(f"NVRTC {nvrtc.version()} makes no precompiled headers")
    op_dir = tmp_path / "gelu"
    shutil.copytree(sources.OPS_DIR / "gelu", op_dir)
    assert nvrtc.warm_for_op("gelu", op_dir, arch=ARCH)
    logs = request.getfixturevalue("nvrtc_logs")  # the compiles from here on
    cu = op_dir / "gelu_cuda.cu"
    cu.write_text(cu.read_text() + "\n__device__ float an_edit(float v) { return v; }\n")
    name = "ops_common::elementwise_kernel<4, 2, ops_common::PointwiseApply<gelu_op::Forward, float>, float, 1>"
    nvrtc.compile_for_op("gelu", op_dir, cu, [name], arch=ARCH, cache_dir=tmp_path / "c")
    assert len(logs) == 1 and "using precompiled header" in logs[0], logs


@needs_cuda_build
def test_without_a_temporary_folder_nvrtc_compiles_without_the_header(tmp_path, monkeypatch):
    (tmp_path / "probe.cu").write_text(PROBE_SOURCE)
    (tmp_path / "probe.h").write_text("#pragma once\n#define PROBE_SCALE 1.0f\n")
    monkeypatch.setattr(nvrtc, "_PCH_ROOT", [])

    def no_folder(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/tmp")

    monkeypatch.setattr(nvrtc.tempfile, "mkdtemp", no_folder)
    kernels = _probe_compile(tmp_path, tmp_path / "c")
    assert kernels.image[:4] == b"\x7fELF" and not nvrtc._PCH_ROOT


def _std_lite_math() -> tuple[list[str], list[str], list[str]]:
    """The unary, binary and other math names ops/common/std_lite.h gives NVRTC."""
    text = (sources.OPS_DIR / "common" / "std_lite.h").read_text()
    unary = re.findall(r"^OPS_STD_LITE_UNARY\((\w+)\)", text, re.M)
    binary = re.findall(r"^OPS_STD_LITE_BINARY\((\w+)\)", text, re.M)
    other = sorted(set(re.findall(r"^__device__ (?:inline|constexpr) [\w&\s]*? (\w+)\(", text, re.M))
                   - set(unary) - set(binary))
    return unary, binary, other


def _math_probe() -> str:
    """Device-and-host code calling every math name of std_lite.h, as an op's math header
    would: std::NAME on float and double, and ops_common::rsqrt."""
    unary, binary, other = _std_lite_math()
    calls = [f"std::{n}(x)" for n in unary] + [f"std::{n}(x, y)" for n in binary]
    special = {"abs": ["std::abs(x)", "T(std::abs(-3))"], "fma": ["std::fma(x, y, x)"],
               "pow": ["T(std::pow(x, 2))"],  # a float and an int: computed in double
               "min": ["std::min(x, y)", "T(std::min(3, 4))"], "max": ["std::max(x, y)"]}
    for name in other:
        calls += special.get(name, [f"T(std::{name}(x))"])
    calls.append("ops_common::rsqrt(x)")
    body = " +\n         ".join(calls)
    return ('#include "common/std_lite.h"\n'
            "template <typename T>\n"
            f"OPS_HOST_DEVICE T all_math(T x, T y) {{\n  return {body};\n}}\n"
            "#if defined(__CUDACC__)\n"
            "template <typename T>\n"
            "__global__ void math_kernel(const T* x, T* y) { y[0] = all_math(x[0], x[1]); }\n"
            "#else\n"
            "template float all_math<float>(float, float);\n"
            "template double all_math<double>(double, double);\n"
            "#endif\n")


def test_std_lite_gives_nvrtc_the_math_an_op_reaches_for(tmp_path):
    """A math header may use std::sqrt, log1p, erf, pow, fma, min/max, the hyperbolics...:
    under NVRTC (a kernel swap) they come from std_lite.h, and the same text builds as host
    code with the standard headers."""
    unary, binary, other = _std_lite_math()
    for name in ("sqrt", "log1p", "expm1", "erf", "exp", "log", "sinh", "cosh", "tanh", "asinh",
                 "acosh", "atanh"):
        assert name in unary, name
    assert {"pow", "fmin", "fmax"} <= set(binary) and {"fma", "min", "max", "abs"} <= set(other)
    probe = tmp_path / "math_probe.cu"
    probe.write_text(_math_probe())
    if nvrtc.why_unavailable():
        pytest.skip(nvrtc.why_unavailable())
    names = ["math_kernel<float>", "math_kernel<double>"]
    kernels = nvrtc.compile_kernels(probe, names, arch=ARCH, cache_dir=tmp_path / "c",
                                    include_dirs=[sources.OPS_DIR])
    assert set(kernels.lowered) == set(names) and kernels.image[:4] == b"\x7fELF"
    host = tmp_path / "math_probe.cpp"
    host.write_text(probe.read_text())
    compiled = subprocess.run([jit_loader.cxx_compiler(), "-std=c++17", "-fsyntax-only",
                               f"-I{sources.OPS_DIR}", str(host)], capture_output=True, text=True,
                              timeout=120)
    assert compiled.returncode == 0, compiled.stderr


REDUCE_PROBE = """#include "common/reduce.cuh"
template <typename T>
__global__ void reduce_kernel(const T* x, T* y) {
  const T v = x[threadIdx.x];
  y[0] = ops_common::block_sum(v) + ops_common::block_reduce(v, ops_common::Max{}, T(-1)) +
         ops_common::block_reduce(v, ops_common::Min{}, T(1)) + ops_common::warp_sum(v);
}
"""


def test_the_reduction_helpers_compile_through_nvrtc(tmp_path):
    """common/reduce.cuh needs no header NVRTC lacks: a kernel using it swaps."""
    if nvrtc.why_unavailable():
        pytest.skip(nvrtc.why_unavailable())
    probe = tmp_path / "reduce_probe.cu"
    probe.write_text(REDUCE_PROBE)
    names = ["reduce_kernel<float>", "reduce_kernel<double>"]
    kernels = nvrtc.compile_kernels(probe, names, arch=ARCH, cache_dir=tmp_path / "c",
                                    include_dirs=[sources.OPS_DIR])
    assert set(kernels.lowered) == set(names)
