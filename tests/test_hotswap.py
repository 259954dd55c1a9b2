"""jit_tools.swap.hotswap: the load path swaps a device-only edit in with NVRTC, and builds the rest.

Without a GPU: which edits count as device-only (a kernel body yes; a launcher, a kernel
signature, a header the host glue includes no; the math header, which the CPU loops
include, live with those loops stale: tests/test_live_edits.py goes on from there);
``JIT_LOADER_NVRTC=0`` and a process without a GPU take the Ninja build; the load path's bookkeeping around a swap (the driver part
faked). On a GPU: a kernel-body edit of a scaffolded op runs at the next call without
Ninja, the new key's full build is published in the background for a new process, and an
NVRTC error names the .cu's line while the old kernels keep running.
"""

from __future__ import annotations

import logging
import threading
import types

import pytest
import torch

import jit_loader
from jit_tools import key as keys, pipeline
from jit_tools.errors import BuildError
from jit_tools import sources
from jit_tools.swap import edits, hotswap, kernels
from jit_tools.tools import scaffold
from subproc import json_result, run_python
from toy_ops import FORWARD_BODY, plant_undeclared

CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None
PLUS_ONE = FORWARD_BODY.replace("x[i])));", "x[i])) + 1);")
TIMES_TWO = FORWARD_BODY.replace("x[i])));", "x[i])) * 2);")
LAUNCH_LINE = "if (n == 0) return cudaSuccess;"

KERNEL = """\
#include "common/launch.h"
constexpr int kThreads = 256;
// the kernel
template <typename T>
__global__ void scale_kernel(const T* x, T* y, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = twice(x[i]);
  }
}
__device__ __forceinline__ float twice(float v) { return 2 * v; }
__host__ __device__ inline float both(float v) { return v + 1; }
#if !defined(__CUDACC_RTC__)
cudaError_t launch_scale(const float* x, float* y, long n, cudaStream_t stream) {
  return ops_common::launch(scale_kernel<float>, 1, kThreads, 0, stream, x, y, n);
}
#endif
"""


def view_after(old: str, new: str) -> bool:
    """True when replacing old by new in KERNEL leaves what host code sees unchanged."""
    assert old in KERNEL
    return edits.host_view(KERNEL.replace(old, new)) == edits.host_view(KERNEL)


# A .cu that instantiates its kernels through macros written without a semicolon, as the
# bundled pointwise ops do, then gains a device function: host code sees no change, and the
# macro lines stay part of what it sees.
MACRO_UNIT = """#include "common/vectorized.cuh"
OPS_INSTANTIATE_UNARY(op::Forward)
OPS_INSTANTIATE_BINARY(op::Backward)
"""


def test_a_device_function_added_after_macro_lines_is_device_only():
    added = MACRO_UNIT + "__device__ float extra(float v) { return v + 1; }\n"
    templated = MACRO_UNIT + "template <typename T>\n__device__ T extra(T v) { return v; }\n"
    assert edits.host_view(added) == edits.host_view(MACRO_UNIT)
    assert edits.host_view(templated) == edits.host_view(MACRO_UNIT)
    assert "OPS_INSTANTIATE_BINARY(op::Backward)" in edits.host_view(added)
    edited = MACRO_UNIT.replace("op::Backward", "op::Other") + "__device__ float extra(float v) { return v; }\n"
    assert edits.host_view(edited) != edits.host_view(MACRO_UNIT)


@pytest.mark.parametrize("old,new", [
    ("y[i] = twice(x[i]);", "y[i] = twice(x[i]) + 1;"),          # a kernel body
    ("return 2 * v;", "return 3 * v;"),                           # a device function
    ("float twice(float v)", "float twice(float v, int k = 0)"),  # its signature: device only
    ("// the kernel", "// the kernel, edited"),                  # a comment
])
def test_device_code_edits_leave_the_host_view_alone(old, new):
    assert view_after(old, new)


@pytest.mark.parametrize("old,new", [
    ("kThreads, 0, stream", "kThreads * 2, 0, stream"),    # a launcher
    ("constexpr int kThreads = 256;", "constexpr int kThreads = 128;"),  # shared constant
    ("const T* x, T* y, long n", "const T* x, T* y, int n"),  # a kernel signature
    ("return v + 1;", "return v + 2;"),                    # __host__ __device__: host runs it
    ("#include \"common/launch.h\"", "#include \"common/launch.h\"\n#define EXTRA 1"),
])
def test_host_visible_edits_change_the_host_view(old, new):
    assert not view_after(old, new)


_NAMES = iter(f"hotswap_probe_{i}" for i in range(100))


@pytest.fixture
def probe(tmp_path):
    """A scaffolded CUDA op (not built) and a state-like record of its sources as if its
    build were live."""
    name = next(_NAMES)
    plan = scaffold.create(name, tmp_path, cuda=True)
    state = types.SimpleNamespace(name=name, op_dir=plan.op_dir, options={}, live=None, key="K")
    key, config, compiled, inputs = keys.compute_key(name, plan.op_dir, {})
    hotswap.record(state, key, config, compiled, inputs)
    return state, config, compiled, plan.op_dir


def judged(probe, config=None, texts=None):
    state, live_config, compiled, op_dir = probe
    texts = hotswap.current_texts(state, compiled) if texts is None else texts
    return hotswap.why_not_live(state.live, live_config if config is None else config, texts,
                                compiled, sources.include_dirs(op_dir, {}))


def why_not(probe) -> str | None:
    """Why the edit builds; None when it is device-only (live, no host unit stale)."""
    verdict = judged(probe)
    if isinstance(verdict, str):
        return verdict
    return f"stale: {[p.name for p in verdict.stale_units]}" if verdict.stale_units else None


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_kernel_body_edit_is_device_only(probe):
    state, _, _, op_dir = probe
    assert state.live is not None and why_not(probe) == "no source changed"
    edit(op_dir / f"{state.name}_cuda.cu", FORWARD_BODY, PLUS_ONE)
    assert why_not(probe) is None


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_launcher_edit_is_not_device_only(probe):
    state, _, _, op_dir = probe
    edit(op_dir / f"{state.name}_cuda.cu", LAUNCH_LINE, "if (n <= 0) return cudaSuccess;")
    assert why_not(probe) == (f"the host code of {state.name}_cuda.cu changed (more than "
                              "function bodies)")


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_header_the_host_glue_includes_is_not_device_only(probe):
    state, _, _, op_dir = probe
    header = op_dir / f"{state.name}_host.h"  # the checks: host glue
    header.write_text(header.read_text() + "\n// edited\n")
    assert why_not(probe) == (f"{state.name}.cpp includes {state.name}_host.h and is not a "
                              "CPU-loop unit (<op>_cpu.cpp)")


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_the_math_header_is_live_with_the_cpu_loops_stale(probe):
    state, _, _, op_dir = probe
    edit(op_dir / f"{state.name}.h", "return signed_square(x);", "return signed_square(x) * T(2);")
    assert why_not(probe) == f"stale: ['{state.name}_cpu.cpp']"


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_new_file_or_new_flags_are_not_device_only(probe):
    state, config, compiled, op_dir = probe
    texts = hotswap.current_texts(state, compiled)
    assert judged(probe, config=dict(config, cuda_cflags=["-O2"])) == \
        "the build configuration changed"
    texts[op_dir / "extra.cu"] = b""
    assert judged(probe, texts=texts) == "files were added or removed"


@pytest.fixture
def faked_driver(monkeypatch):
    """A GPU and a swap that succeed, recorded instead of done (no driver here)."""
    calls = types.SimpleNamespace(swaps=[], builds=[], tracks=[])
    monkeypatch.setattr(hotswap, "gpu_visible", lambda: True)
    monkeypatch.setattr(kernels, "swap", lambda state, opts=None, texts=None: calls.swaps.append(
        state.name) or [f"{state.name}_op::forward_kernel<float>"])
    monkeypatch.setattr(kernels, "track", lambda state, on=True: calls.tracks.append(on))
    monkeypatch.setattr(hotswap, "build_later", lambda state, key, *a: calls.builds.append(key))
    return calls


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_try_swap_swaps_a_device_only_edit_and_not_with_nvrtc_0(probe, faked_driver, monkeypatch):
    state, config, compiled, op_dir = probe
    cu = op_dir / f"{state.name}_cuda.cu"
    edit(cu, FORWARD_BODY, PLUS_ONE)
    key = keys.compute_key(state.name, op_dir, {})[0]
    monkeypatch.setenv("JIT_LOADER_NVRTC", "0")
    assert not hotswap.try_swap(state, key, config, compiled, [])
    assert faked_driver.swaps == []
    monkeypatch.delenv("JIT_LOADER_NVRTC")
    assert hotswap.try_swap(state, key, config, compiled, [])
    assert faked_driver.swaps == [state.name] and faked_driver.builds == [key]
    edit(cu, LAUNCH_LINE, "if (n <= 0) return cudaSuccess;")
    assert not hotswap.try_swap(state, key, config, compiled, [])
    assert faked_driver.swaps == [state.name]  # a launcher edit: no swap tried


@pytest.fixture
def built_probe(tmp_path, monkeypatch):
    """A scaffolded CUDA op, built and loaded into a cache of its own (an edit the test
    makes must compile, whatever earlier runs left in the user's cache)."""
    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))
    name = next(_NAMES)
    plan = scaffold.create(name, tmp_path, cuda=True)
    op = jit_loader.load(plan.op_dir)
    yield op, plan.op_dir / f"{name}_cuda.cu"
    hotswap.wait_for_background(op._state)


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_without_a_gpu_a_kernel_edit_builds_normally(built_probe, monkeypatch, caplog):
    op, cu = built_probe
    monkeypatch.setattr(hotswap, "gpu_visible", lambda: False)
    before = op.build.key
    edit(cu, FORWARD_BODY, PLUS_ONE)
    with caplog.at_level(logging.DEBUG, logger="jit_loader"):
        assert op.reload()
    assert op.build.compiled and op.build.key != before and op.build.swapped_over is None
    assert op._state.swapped is None and op.build.key == op._state.key
    assert "no kernel swap: no GPU is visible" in caplog.text


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_the_load_path_records_a_swap_over_the_live_build(built_probe, faked_driver):
    op, cu = built_probe
    key, library = op.build.key, op.library
    original = cu.read_text()
    edit(cu, FORWARD_BODY, PLUS_ONE)
    assert op.reload()
    new_key = op.current_key()
    assert faked_driver.swaps == [op.name] and faked_driver.builds == [new_key]
    assert not op.build.compiled and op.library == library
    assert (op.build.key, op.build.swapped_over, op._state.key) == (new_key, key, key)
    assert not op.reload()  # nothing changed since
    cu.write_text(original)  # back to the live build's sources: its own kernels again
    assert op.reload()
    assert faked_driver.tracks[-2:] == [False, True]
    assert (op.build.key, op.build.swapped_over, op._state.swapped) == (key, None, None)


# ---- on a GPU ------------------------------------------------------------------------------

@pytest.fixture
def gpu_probe(tmp_path, monkeypatch):
    """A scaffolded CUDA op in a private cache, loaded on the GPU (tracking on), and a
    record of which threads ran a Ninja build."""
    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))
    name = next(_NAMES)
    plan = scaffold.create(name, tmp_path, cuda=True)
    op = jit_loader.load(plan.op_dir)
    builds = []
    real = pipeline.builder.build

    def counting(*args, **kwargs):
        builds.append(threading.current_thread() is threading.main_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline.builder, "build", counting)
    monkeypatch.setattr(hotswap.builder, "build", counting)
    yield op, plan.op_dir, getattr(torch.ops, name).forward, builds
    hotswap.wait_for_background(op._state)


@pytest.mark.cuda
def test_a_kernel_edit_runs_at_the_next_call_and_a_new_process_loads_its_build(gpu_probe):
    op, op_dir, forward, builds = gpu_probe
    cu = op_dir / f"{op.name}_cuda.cu"
    x = torch.randn(10_000, device="cuda")
    before = forward(x)  # launched once: tracked
    key, library = op.build.key, op.library
    edit(cu, FORWARD_BODY, PLUS_ONE)
    assert op.reload()
    torch.testing.assert_close(forward(x), before + 1)
    assert (op.library, op.build.swapped_over, op.build.compiled) == (library, key, False)
    assert True not in builds  # no Ninja build on the load's thread
    new_key = op.build.key
    hotswap.wait_for_background(op._state)
    assert builds == [False]  # the new key's full build, in the background
    probe = (f"import json, jit_loader; op = jit_loader.load({str(op_dir)!r}); "
             "print(json.dumps([op.build.key, op.build.compiled]))")
    assert json_result(run_python(probe)) == [new_key, False]  # published, cached
    torch.testing.assert_close(forward(x), before + 1)  # still the swapped kernel here


@pytest.mark.cuda
def test_an_nvrtc_error_in_the_load_path_keeps_the_old_kernels(gpu_probe):
    op, op_dir, forward, builds = gpu_probe
    cu = op_dir / f"{op.name}_cuda.cu"
    x = torch.randn(1000, device="cuda")
    before = forward(x)
    text, where = plant_undeclared(cu)
    with pytest.raises(BuildError) as info:
        op.reload()
    assert str(info.value).splitlines()[0].startswith(where)
    torch.testing.assert_close(forward(x), before)
    assert builds == []
    cu.write_text(text.replace(FORWARD_BODY, TIMES_TWO))
    assert op.reload()  # fixed: swapped in
    torch.testing.assert_close(forward(x), before * 2)


@pytest.mark.cuda
def test_jit_loader_nvrtc_0_builds_a_kernel_edit(gpu_probe, monkeypatch):
    op, op_dir, forward, builds = gpu_probe
    monkeypatch.setenv("JIT_LOADER_NVRTC", "0")
    x = torch.randn(1000, device="cuda")
    before = forward(x)
    edit(op_dir / f"{op.name}_cuda.cu", FORWARD_BODY, PLUS_ONE)
    assert op.reload()
    assert builds == [True] and op.build.compiled and op.build.swapped_over is None
    torch.testing.assert_close(forward(x), before + 1)


def test_only_edit_sessions_warm_the_nvrtc_header(monkeypatch):
    monkeypatch.delenv("JIT_LOADER_NVRTC_WARM", raising=False)
    monkeypatch.setattr(hotswap, "gpu_visible", lambda: False)
    hotswap.expect_kernel_edits(False)
    assert not hotswap.interactive()  # a script, a training job: no NVRTC before an edit
    hotswap.expect_kernel_edits()  # what the notebook extension says
    assert hotswap.interactive()
    monkeypatch.setenv("JIT_LOADER_NVRTC_WARM", "0")
    assert not hotswap.interactive()
    monkeypatch.setenv("JIT_LOADER_NVRTC_WARM", "1")
    hotswap.expect_kernel_edits(False)
    assert hotswap.interactive()


@pytest.mark.cuda
def test_a_warmed_header_serves_the_first_kernel_edit(tmp_path, monkeypatch, request):
    from jit_tools.swap import nvrtc

    if not nvrtc.pch_enabled():
        pytest.skip(f"NVRTC {nvrtc.version()} makes no precompiled headers")
    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JIT_LOADER_NVRTC_WARM", "1")
    plan = scaffold.create(next(_NAMES), tmp_path, cuda=True)
    op = jit_loader.load(plan.op_dir)
    forward = getattr(torch.ops, op.name).forward
    x = torch.randn(1000, device="cuda")
    before = forward(x)
    op.wait_for_background()  # the warmed header is made
    logs = request.getfixturevalue("nvrtc_logs")  # the compiles from here on
    edit(plan.op_dir / f"{op.name}_cuda.cu", FORWARD_BODY, PLUS_ONE)
    assert op.reload() and op.build.swapped_over is not None
    torch.testing.assert_close(forward(x), before + 1)
    assert len(logs) == 1 and "using precompiled header" in logs[0], logs
    op.wait_for_background()
