"""jit_tools.swap.kernels: an edited kernel swapped into the live process through NVRTC.

On a GPU: a scaffolded CUDA op is loaded, its kernel body edited, and after
``kernels.swap`` the next call runs the new kernel with no build and no new library; an
NVRTC error leaves the running kernel in place; a changed kernel signature is refused
(the launchers must be compiled again); switching tracking off restores the build's
kernels. Without a GPU: the table is there, off, in every op library,
``JIT_LOADER_NVRTC=0`` refuses a swap, and the swap's compile step takes an edited kernel
body and refuses a changed signature, on the kernels of an nvcc build.
"""

from __future__ import annotations

import ctypes

import shutil

import pytest
import torch

import jit_loader
from jit_tools.errors import BuildError
from jit_tools.swap import hotswap, kernels, nvrtc
from jit_tools.tools import scaffold
from toy_ops import FORWARD_BODY, plant_undeclared

CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_loaded_op_tracks_its_kernels_and_records_none_without_a_launch():
    op = jit_loader.load("gelu")
    lib = kernels.op_library(op)
    lib.jit_loader_kernel_count.restype = ctypes.c_int
    if hotswap.gpu_visible():  # launches record their kernels
        return
    # The table is on (the load path does not start CUDA to ask for a GPU), but a process
    # without a GPU launches nothing, so it records nothing.
    assert lib.jit_loader_kernel_count() == 0
    assert kernels.launched(op) == []


def test_jit_loader_nvrtc_0_refuses_a_swap(monkeypatch):
    monkeypatch.setenv("JIT_LOADER_NVRTC", "0")
    with pytest.raises(kernels.SwapRefused, match="JIT_LOADER_NVRTC=0"):
        kernels.swap(object())


def test_unnamed_namespaces_compare_equal_across_compilers():
    nvcc = "_ZN4lltm51_GLOBAL__N__ID_12_lltm_cuda_cu_9f8d80b6_2261714forward_kernelIdEEvv"
    rtc = "_ZN4lltm51_GLOBAL__N__ID_12_lltm_cuda_cu_ad183eee_2079314forward_kernelIdEEvv"
    assert kernels.unnamed_namespace_free(nvcc) == kernels.unnamed_namespace_free(rtc)
    assert kernels.unnamed_namespace_free(nvcc) != kernels.unnamed_namespace_free(
        rtc.replace("IdE", "IfE"))


_NAMES = iter(f"swap_probe_{i}" for i in range(100))


@pytest.fixture
def swap_op(tmp_path):
    """A freshly scaffolded CUDA op (a namespace of its own) with its kernel table on."""
    name = next(_NAMES)
    plan = scaffold.create(name, tmp_path, cuda=True)
    op = jit_loader.load(plan.op_dir)
    kernels.track(op)
    yield op, plan.op_dir / f"{name}_cuda.cu", getattr(torch.ops, name).forward
    kernels.track(op, False)


@pytest.mark.cuda
def test_an_edited_kernel_runs_at_the_next_call_without_a_build(swap_op):
    op, cu, forward = swap_op
    x = torch.randn(10_000, device="cuda")
    before = forward(x)
    key, library = op.build.key, op.library
    text = cu.read_text()
    assert FORWARD_BODY in text
    cu.write_text(text.replace(FORWARD_BODY, FORWARD_BODY.replace(")));", ")) + 1);")))
    assert kernels.swap(op) == [f"{op.name}_op::forward_kernel<float>"]
    torch.testing.assert_close(forward(x), before + 1)
    assert (op.build.key, op.library) == (key, library)  # no build, no new library
    # The swapped kernel is captured by a CUDA graph like the built one.
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        y = forward(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, before + 1)
    kernels.track(op, False)  # the build's kernels again
    torch.testing.assert_close(forward(x), before)


def _undeclared_variable(cu):
    """An NVRTC compile error: its first line names the kernel file and the line."""
    _, where = plant_undeclared(cu)
    return BuildError, lambda error: str(error).splitlines()[0].startswith(where)


def _changed_signature(cu):
    """A kernel signature the compiled launchers do not call."""
    text = cu.read_text()
    signature = "forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n)"
    assert signature in text
    cu.write_text(text.replace(signature, signature.replace("int64_t n", "int n")))
    return kernels.SwapRefused, lambda error: "signature" in str(error)


@pytest.mark.cuda
@pytest.mark.parametrize("plant", [_undeclared_variable, _changed_signature])
def test_a_refused_swap_keeps_the_running_kernel(swap_op, plant):
    op, cu, forward = swap_op
    x = torch.randn(1000, device="cuda")
    before = forward(x)
    error, explained = plant(cu)
    with pytest.raises(error) as info:
        kernels.swap(op)
    assert explained(info.value), info.value
    torch.testing.assert_close(forward(x), before)


@pytest.fixture
def lltm_in_use(tmp_path):
    """A copy of the lltm op folder, and the kernels of the bundled lltm build (as if the
    process had launched every one of them)."""
    op = jit_loader.load("lltm")
    copy = tmp_path / "lltm"
    shutil.copytree(op.path, copy)
    return copy, nvrtc.library_kernels(op.library)


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_an_edited_kernel_body_compiles_into_the_kernels_in_use(lltm_in_use, tmp_path):
    copy, in_use = lltm_in_use
    cu = copy / "lltm_cuda.cu"
    body = "      new_h(b, j) = from_acc<scalar_t>(r.new_h);"
    assert body in cu.read_text()
    cu.write_text(cu.read_text().replace(body, body.replace("r.new_h", "r.new_h + 1"), 1))
    compiled, exprs = kernels.compile_in_use("lltm", copy, in_use, "9.0")
    assert sorted(exprs.values()) == sorted(in_use) and len(exprs) == 24  # 6 kernels x 4 dtypes
    assert set(compiled.lowered) == set(exprs)


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_changed_signature_is_refused_without_a_gpu(lltm_in_use):
    copy, in_use = lltm_in_use
    cu = copy / "lltm_cuda.cu"
    signature = "    forward_kernel(int64_t batch, int64_t state,"
    assert signature in cu.read_text()
    cu.write_text(cu.read_text().replace(signature, signature.replace("int64_t batch", "int batch")))
    with pytest.raises(kernels.SwapRefused, match=r"signature of lltm::forward_kernel<"):
        kernels.compile_in_use("lltm", copy, in_use, "9.0")
