"""jit_tools.builder.nvcc_parallel: nvcc's steps with the host and device halves side by side.

Each test compiles a small torch-free .cu with nvcc itself and through the driver and
compares what came out: the object's sections, its symbols, the dependency file, the
errors and the status. No GPU is needed (what the objects run as is the GPU suite's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from jit_tools.builder import nvcc_parallel, speedups, toolchain
from subproc import child_env, run_interpreter, start_interpreter

HOME = toolchain.cuda_home()
NVCC = os.path.join(HOME, "bin", "nvcc") if HOME else None
pytestmark = pytest.mark.skipif(NVCC is None or not os.path.exists(NVCC) or shutil.which("objcopy") is None,
                                reason="needs nvcc and binutils")

UNIT = r"""
#include <cuda_runtime.h>
#include "unit.h"

namespace {
__global__ void fill_kernel(float* out, int n, float value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
}  // namespace

template <typename T>
__global__ void axpy_kernel(T* y, const T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

cudaError_t launch_fill(float* out, int n, float value, cudaStream_t stream) {
  fill_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, n, value * kScale);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_axpy(T* y, const T* x, T a, int n, cudaStream_t stream) {
  axpy_kernel<T><<<(n + 255) / 256, 256, 0, stream>>>(y, x, a, n);
  return cudaGetLastError();
}
template cudaError_t launch_axpy<float>(float*, const float*, float, int, cudaStream_t);
template cudaError_t launch_axpy<double>(double*, const double*, double, int, cudaStream_t);
"""

ONE_ARCH = ["-gencode=arch=compute_90,code=sm_90"]
TWO_ARCHS = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=compute_90"]


@pytest.fixture
def unit(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "unit.h").write_text("#pragma once\nconstexpr float kScale = 2.0f;\n")
    (src / "unit.cu").write_text(UNIT)
    return src / "unit.cu"


def sections(obj: Path) -> dict[str, bytes]:
    """Every section's bytes but the symbol and string tables, whose file symbol names
    the temporary host file (a new name on every run, with nvcc as with the driver)."""
    heads = subprocess.run(["objdump", "-h", str(obj)], capture_output=True, text=True,
                           check=True).stdout
    out = {}
    for name in re.findall(r"^\s*\d+\s+(\S+)\s", heads, re.M):
        dump = obj.with_name(obj.name + name.replace("/", "_") + ".bin")
        subprocess.run(["objcopy", "-O", "binary", f"--only-section={name}", str(obj), str(dump)],
                       check=True, capture_output=True)
        out[name] = dump.read_bytes()
    return out


def symbols(obj: Path) -> str:
    return subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout


def nvcc_module_id(unit: Path, flags: list[str], out: Path) -> str:
    """Compile with nvcc itself, keeping its files; the module id it made."""
    keep = out.parent / "keep"
    keep.mkdir()
    subprocess.run([NVCC, "--keep", "--keep-dir", str(keep), *flags, "-c", str(unit), "-o", str(out)],
                   check=True, capture_output=True, cwd=out.parent)
    return next(keep.glob("*.module_id")).read_text()


def through_driver(unit: Path, flags: list[str], out: Path, capfd, **kw) -> tuple[int, str, str]:
    tmp = out.parent / "driver-tmp"
    tmp.mkdir()
    status = nvcc_parallel.compile_cu(NVCC, [*flags, "-c", str(unit), "-o", str(out)], str(tmp), **kw)
    captured = capfd.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("archs", [ONE_ARCH, TWO_ARCHS], ids=["one-arch", "two-archs"])
@pytest.mark.parametrize("parallel", [True, False], ids=["side-by-side", "in-order"])
def test_object_holds_the_bytes_nvcc_writes(unit, tmp_path, capfd, archs, parallel):
    flags = [*archs, "-O3", "-lineinfo", "--compiler-options", "-fPIC", "-std=c++17"]
    ref = tmp_path / "nvcc" / "unit.o"
    ref.parent.mkdir()
    module_id = nvcc_module_id(unit, flags, ref)
    ours = tmp_path / "driver" / "unit.o"
    ours.parent.mkdir()
    status, out, err = through_driver(unit, flags, ours, capfd, module_id=module_id, parallel=parallel)
    assert status == 0, err
    assert module_id in symbols(ours)  # the anonymous namespace's kernel carries the id
    assert symbols(ours) == symbols(ref)
    ref_sections, our_sections = sections(ref), sections(ours)
    assert ".nv_fatbin" in our_sections and len(our_sections[".nv_fatbin"]) > 1000
    assert our_sections == ref_sections


@pytest.mark.parametrize("dep_flag", ["-MD", "-MMD"])
def test_dependency_file_lists_what_nvcc_lists(unit, tmp_path, capfd, dep_flag):
    ref_dir, our_dir = tmp_path / "nvcc", tmp_path / "driver"
    ref_dir.mkdir()
    our_dir.mkdir()
    subprocess.run([NVCC, dep_flag, "-MF", "unit.o.d", *ONE_ARCH, "-c", str(unit), "-o", "unit.o"],
                   cwd=ref_dir, check=True, capture_output=True)
    (our_dir / "tmp").mkdir()
    cwd = os.getcwd()
    os.chdir(our_dir)
    try:
        status = nvcc_parallel.compile_cu(NVCC, [dep_flag, "-MF", "unit.o.d", *ONE_ARCH, "-c", str(unit),
                                                 "-o", "unit.o"], str(our_dir / "tmp"))
    finally:
        os.chdir(cwd)
    assert status == 0, capfd.readouterr().err

    def parse(path: Path) -> tuple[str, set[str]]:
        target, _, deps = path.read_text().replace("\\\n", " ").partition(":")
        return target.strip(), set(deps.split())

    ref_target, ref_deps = parse(ref_dir / "unit.o.d")
    our_target, our_deps = parse(our_dir / "unit.o.d")
    assert ref_target == our_target == "unit.o"
    assert str(unit.with_name("unit.h")) in our_deps
    assert our_deps == ref_deps


@pytest.mark.parametrize("broken, expected", [
    # cudafe++ and cicc both parse the source: the error is printed once, as nvcc does.
    ("__global__ void k(float* x) { x[0] = 1 }\n", 'expected a ";"'),
    # ptxas fails while the host compile runs beside it.
    ('__global__ void k(float* x) { asm volatile("bogus.op;"); }\n', "bogus"),
], ids=["source", "ptx"])
def test_errors_read_as_nvccs(unit, tmp_path, capfd, broken, expected):
    unit.write_text(broken + "void launch(float* x) { k<<<1, 1>>>(x); }\n")
    ref = subprocess.run([NVCC, *ONE_ARCH, "-c", str(unit), "-o", str(tmp_path / "ref.o")],
                         capture_output=True, text=True)
    assert ref.returncode != 0
    status, out, err = through_driver(unit, ONE_ARCH, tmp_path / "ours.o", capfd)
    normalise = lambda text: re.sub(r"/\S*tmpxft_\w+", "TMP", text)
    assert status == ref.returncode
    assert expected in err and err.count(expected) == ref.stderr.count(expected)
    assert normalise(err) == normalise(ref.stderr)
    assert out == ref.stdout
    assert not (tmp_path / "ours.o").exists()


def test_other_outputs_run_through_nvcc(unit, tmp_path):
    """PTX only: not the chain this driver knows; nvcc runs it as it is."""
    with pytest.raises(nvcc_parallel.Unrecognised):
        nvcc_parallel.plan(NVCC, [*ONE_ARCH, "-ptx", str(unit), "-o", "unit.ptx"], str(tmp_path))
    proc = run_interpreter("-S", "-E", nvcc_parallel.__file__, NVCC, "-arch=sm_90", "-ptx", unit,
                           "-o", tmp_path / "unit.ptx")
    assert proc.returncode == 0, proc.stderr
    assert "axpy_kernel" in (tmp_path / "unit.ptx").read_text()


def test_shim_is_named_nvcc_and_has_an_off_switch(tmp_path, monkeypatch):
    monkeypatch.delenv("JIT_LOADER_NVCC_PARALLEL", raising=False)
    shim = speedups.parallel_nvcc(tmp_path, NVCC)
    assert shim is not None and os.path.basename(shim) == "nvcc"  # ccache goes by the name
    version = subprocess.run([shim, "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and "Cuda compilation tools" in version.stdout
    assert speedups.parallel_nvcc(tmp_path, NVCC) == shim  # built once
    monkeypatch.setenv("JIT_LOADER_NVCC_PARALLEL", "0")
    assert speedups.parallel_nvcc(tmp_path, NVCC) is None


def test_host_optimisation_level_leaves_device_code_alone(unit, tmp_path):
    """The loader compiles a .cu's host half at -O1 (DEFAULT_CUDA_CFLAGS): nvcc's -O is
    the host compiler's level, and the device code is the same bytes at -O1 and -O3."""
    from jit_tools.key import DEFAULT_CUDA_CFLAGS
    assert "-O1" in DEFAULT_CUDA_CFLAGS
    fatbins = {}
    for level in ("-O1", "-O3"):
        obj = tmp_path / f"unit{level}.o"
        subprocess.run([NVCC, level, "-lineinfo", *TWO_ARCHS, "-c", str(unit), "-o", str(obj)],
                       check=True, capture_output=True)
        fatbins[level] = sections(obj)[".nv_fatbin"]
    assert len(fatbins["-O1"]) > 1000 and fatbins["-O1"] == fatbins["-O3"]


def test_stopped_driver_leaves_no_temporary_files(unit, tmp_path):
    """Ninja stops a build with SIGTERM: the steps stop and the driver's folder goes."""
    import signal
    import time
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    proc = start_interpreter("-S", "-E", nvcc_parallel.__file__, NVCC, *TWO_ARCHS, "-c", unit,
                             "-o", tmp_path / "unit.o", env=child_env(TMPDIR=str(tmpdir)),
                             stdout=None, stderr=None)
    deadline = time.monotonic() + 60
    while not any(tmpdir.glob("nvcc-parallel-*/*.cpp4.ii")) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the steps are under way
    assert proc.poll() is None, "the compile ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert list(tmpdir.iterdir()) == []
    assert not (tmp_path / "unit.o").exists()
