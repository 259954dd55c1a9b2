"""Debug builds: ``load(op, debug=True)``, ``JIT_LOADER_DEBUG=1``, ``build OP --debug``.

A debug build is a build of its own key (host ``-O0 -g``, ``OPS_DEBUG``), never served for
a release load and never the reverse, in this process or a new one; it defines OPS_DEBUG,
so ``OPS_ASSERT`` and ``OPS_INDEX`` (ops/common/debug.h) check in it and cost nothing in a
release build; hot reload keeps building it; its device code compiles through NVRTC, so a
kernel swap keeps the checks. On a GPU: a kernel's failed check is raised by the op that
launched it, with the launch helper's account, and a swapped kernel of a debug build runs.
"""

from __future__ import annotations

import shutil
import textwrap

import pytest
import torch

import jit_loader
from jit_tools import key as keys
from jit_tools.swap import nvrtc, nvrtc_options
from jit_tools.tools import scaffold
from tests.subproc import json_result, private_env, run_interpreter, run_python

CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None

# A CPU op on the stable ABI whose loop checks with OPS_ASSERT and OPS_INDEX: scale(x,
# offset) writes y[i + offset] = 2 x[i] for offset 0 and asserts every x[i] < 100.
PROBE_CPP = r"""
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "common/debug.h"

using torch::stable::Tensor;

Tensor scale_cpu(const Tensor& x, int64_t offset) {
  Tensor in = torch::stable::contiguous(x);
  Tensor out = torch::stable::empty_like(in);
  const float* src = in.const_data_ptr<float>();
  float* dst = out.mutable_data_ptr<float>();
  const int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) {
    OPS_ASSERT(src[i] < 100.0f);
    dst[OPS_INDEX(i + offset, n)] = src[i] * 2.0f;
  }
  return out;
}

STABLE_TORCH_LIBRARY(NAME, m) { m.def("scale(Tensor x, int offset) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(NAME, CPU, m) { m.impl("scale", TORCH_BOX(&scale_cpu)); }
"""


def make_probe(folder, name):
    op_dir = folder / name
    op_dir.mkdir(parents=True)
    (op_dir / f"{name}.cpp").write_text(PROBE_CPP.replace("NAME", name))
    return op_dir


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache for this process and the ones it starts, no JIT_LOADER_DEBUG."""
    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JIT_LOADER_DEBUG", raising=False)
    return tmp_path / "cache"


def test_debug_flags_replace_the_optimisation_level_and_translate_for_nvrtc(tmp_path):
    op_dir = make_probe(tmp_path, "flag_probe")
    release = keys.config("flag_probe", op_dir, keys.options(debug=False), [])
    debug = keys.config("flag_probe", op_dir, keys.options(debug=True), [])
    assert "-O3" in release["cflags"] and "debug" not in release
    assert debug["debug"] is True
    assert [f for f in debug["cflags"] if f.startswith("-O")] == ["-O0"]
    assert {"-g", "-DOPS_DEBUG=1", "-UNDEBUG"} <= set(debug["cflags"])
    # Every flag a debug build gives nvcc has an NVRTC twin (a kernel swap compiles with them).
    translated, unknown = nvrtc_options.translate_nvcc_flags([*keys._defaults(keys.DEFAULT_CUDA_CFLAGS, True)])
    assert unknown == [] and {"-lineinfo", "-DOPS_DEBUG=1", "-UNDEBUG"} <= set(translated)


def test_jit_loader_debug_decides_where_the_call_does_not(monkeypatch):
    monkeypatch.setenv("JIT_LOADER_DEBUG", "1")
    assert keys.options() == {"debug": True}
    assert keys.options(debug=False) == {}
    monkeypatch.setenv("JIT_LOADER_DEBUG", "0")
    assert keys.options() == {} and keys.options(debug=True) == {"debug": True}


LOAD = """
import json, sys, torch, jit_loader
kwargs = {} if sys.argv[2] == "default" else {"debug": sys.argv[2] == "debug"}
op = jit_loader.load(sys.argv[1], **kwargs)
ns = getattr(torch.ops, op.name)
x = torch.tensor([1.0, 200.0])
try:
    ns.scale(x, 0)
    checked = None
except RuntimeError as e:
    checked = str(e)
print(json.dumps({"key": op.build.key, "compiled": op.build.compiled, "checked": checked}))
"""


def load_in_new_process(op_dir, cache, mode, **env):
    return json_result(run_python(LOAD, str(op_dir), mode, env=private_env(cache, **env)))


def test_a_debug_build_is_never_served_for_a_release_load_nor_the_reverse(tmp_path, cache):
    op_dir = make_probe(tmp_path, "serve_probe")
    debug = load_in_new_process(op_dir, cache, "debug")
    assert debug["compiled"]
    assert "assertion `src[i] < 100.0f` failed" in debug["checked"]
    assert "serve_probe.cpp:" in debug["checked"]
    release = load_in_new_process(op_dir, cache, "release")
    assert release["compiled"] and release["key"] != debug["key"]  # not the debug build
    assert release["checked"] is None  # OPS_ASSERT compiled out
    # Each is cached under its own key: neither load compiles again nor takes the other.
    assert load_in_new_process(op_dir, cache, "debug") == dict(debug, compiled=False)
    assert load_in_new_process(op_dir, cache, "release") == dict(release, compiled=False)
    # JIT_LOADER_DEBUG=1 is debug=True for a load that does not say; an explicit one wins.
    assert load_in_new_process(op_dir, cache, "default", JIT_LOADER_DEBUG="1")["key"] == debug["key"]
    assert load_in_new_process(op_dir, cache, "release", JIT_LOADER_DEBUG="1")["key"] == release["key"]
    assert jit_loader.op_key(op_dir, debug=True)[0] == debug["key"]
    assert jit_loader.op_key(op_dir)[0] == release["key"]


def test_switching_in_one_process_loads_the_other_build_and_hot_reload_keeps_debug(tmp_path, cache):
    op_dir = make_probe(tmp_path, "switch_probe")
    ns = torch.ops.switch_probe
    x = torch.tensor([1.0, 2.0, 3.0])
    op = jit_loader.load(op_dir, debug=True)
    debug_key = op.build.key
    with pytest.raises(IndexError, match=r"index i \+ offset = 3 is outside \[0, 3\)"):
        ns.scale(x, 1)
    release = jit_loader.load(op_dir)
    assert release.build.key != debug_key
    torch.testing.assert_close(ns.scale(x, 0), x * 2)
    jit_loader.load(op_dir, debug=True)
    assert op.build.key == debug_key and not op.build.compiled
    # An edit reloads into a debug build of the new sources.
    cpp = op_dir / "switch_probe.cpp"
    cpp.write_text(cpp.read_text().replace("src[i] * 2.0f", "src[i] * 3.0f"))
    op.reload()
    assert op.build.compiled and op.build.key == jit_loader.op_key(op_dir, debug=True)[0]
    torch.testing.assert_close(ns.scale(x, 0), x * 3)
    with pytest.raises(IndexError, match="outside"):
        ns.scale(x, 1)


def test_build_debug_on_the_command_line_prebuilds_the_debug_build(tmp_path, cache):
    op_dir = make_probe(tmp_path, "cli_probe")
    env = private_env(cache)
    out = run_interpreter("-m", "jit_loader", "build", str(op_dir), "--debug", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    key = jit_loader.op_key(op_dir, debug=True)[0]
    assert f"key {key}" in out.stdout and "debug build" in out.stdout
    assert load_in_new_process(op_dir, cache, "debug")["compiled"] is False
    listing = run_interpreter("-m", "jit_loader", "list", str(op_dir), env=env).stdout
    assert "debug" in next(l for l in listing.splitlines() if key in l)


# Device code of a debug build: the scaffold's kernel with both checks, compiled by NVRTC
# with the debug build's flags (what a kernel swap of a debug build runs).
CHECKED_BODY = ("OPS_ASSERT(ops_common::to_acc(x[i]) == ops_common::to_acc(x[i]));  // no NaN\n    "
                "y[OPS_INDEX(i, n)] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));")
FORWARD_BODY = "y[i] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));"


def add_checks(cu):
    text = cu.read_text()
    assert FORWARD_BODY in text
    text = text.replace(FORWARD_BODY, CHECKED_BODY, 1)
    cu.write_text(text.replace('#include "common/launch.h"',
                               '#include "common/launch.h"\n#include "common/debug.h"'))


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_the_device_checks_compile_through_nvrtc_in_a_debug_build(tmp_path):
    plan = scaffold.create("rtc_debug_probe", tmp_path, cuda=True)
    cu = plan.op_dir / "rtc_debug_probe_cuda.cu"
    add_checks(cu)
    names = ["rtc_debug_probe_op::forward_kernel<float>"]
    debug = nvrtc.compile_for_op("rtc_debug_probe", plan.op_dir, cu, names, arch="9.0",
                                 opts={"debug": True}, cache_dir=tmp_path / "c")
    release = nvrtc.compile_for_op("rtc_debug_probe", plan.op_dir, cu, names, arch="9.0",
                                   opts={}, cache_dir=tmp_path / "c")
    # The assertion is code in the debug image only (the index check, which the loop's
    # condition proves, the compiler may drop).
    condition = b"ops_common::to_acc(x[i]) == ops_common::to_acc(x[i])"
    assert condition in debug.image and condition not in release.image


@pytest.fixture
def cuda_debug_op(tmp_path, cache):
    plan = scaffold.create("cuda_debug_probe", tmp_path, cuda=True)
    add_checks(plan.op_dir / "cuda_debug_probe_cuda.cu")
    return plan.op_dir


# One call of the probe op's debug build (its folder sys.argv[1]): "raised:" and the error,
# its lines joined by spaces, or "no error".
LAUNCH_ERROR = """
import sys, torch, jit_loader
op = jit_loader.load(sys.argv[1], debug=True)
try:
    op.cuda_debug_probe(torch.randn(1000, device="cuda"))
    print("no error")
except RuntimeError as e:
    print("raised:", str(e).replace("\\n", " "))
"""


def launch_error(op_dir):
    """LAUNCH_ERROR in a new process with a cache of its own; the call must have raised."""
    out = run_python(LAUNCH_ERROR, str(op_dir), env=private_env(op_dir.parent / "cache"))
    assert "raised:" in out.stdout, out.stdout + out.stderr
    return out


@pytest.mark.cuda
def test_a_failed_device_check_is_raised_by_the_op_that_launched_it(cuda_debug_op):
    cu = cuda_debug_op / "cuda_debug_probe_cuda.cu"
    cu.write_text(cu.read_text().replace("y[OPS_INDEX(i, n)]", "y[OPS_INDEX(i + 1, n)]"))
    out = launch_error(cuda_debug_op)
    text = out.stdout + out.stderr
    assert "device-side assert" in out.stdout and "cuda_debug_probe_op::" in out.stdout, text
    # The device printed which index failed, at the kernel's line.
    assert "index i + 1 = 1000 is outside [0, 1000)" in text and "cuda_debug_probe_cuda.cu:" in text


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{path.name} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.cuda
def test_the_launch_helper_refuses_a_host_pointer_in_a_debug_build(cuda_debug_op):
    # The host side hands the launcher a host buffer as the output (the bug a CPU tensor's
    # data would be): the launch is refused, naming the argument.
    cpp = cuda_debug_op / "cuda_debug_probe_cuda.cpp"
    edit(cpp, "#include <torch/csrc/stable/accelerator.h>",
         "#include <vector>\n#include <torch/csrc/stable/accelerator.h>")
    edit(cpp, "cuda_ptr<scalar_t>(x_c), cuda_ptr<scalar_t>(y), y.numel()",
         "cuda_ptr<scalar_t>(x_c), host.data(), y.numel()")
    edit(cpp, "OPS_CHECK_LAUNCH(cuda_debug_probe_op::launch_forward",
         "std::vector<cuda_t<scalar_t>> host(y.numel());\n    "
         "OPS_CHECK_LAUNCH(cuda_debug_probe_op::launch_forward")
    out = launch_error(cuda_debug_op)
    assert "debug build: launch of cuda_debug_probe_op::" in out.stdout
    assert "argument 1" in out.stdout and "is host memory" in out.stdout


@pytest.mark.cuda
def test_the_launch_helper_names_a_block_the_kernel_cannot_take(cuda_debug_op):
    edit(cuda_debug_op / "cuda_debug_probe_cuda.cu", "constexpr int kThreads = 256;",
         "constexpr int kThreads = 2048;")
    out = launch_error(cuda_debug_op)
    assert "a block of (2048,1,1) = 2048 threads; this kernel takes 1 to" in out.stdout


@pytest.mark.cuda
def test_a_kernel_swap_of_a_debug_build_runs_the_checked_kernel(cuda_debug_op):
    from jit_tools.swap import kernels
    op = jit_loader.load(cuda_debug_op, debug=True)
    kernels.track(op)
    x = torch.randn(1000, device="cuda")
    before = op.cuda_debug_probe(x)
    cu = cuda_debug_op / "cuda_debug_probe_cuda.cu"
    cu.write_text(cu.read_text().replace("to_acc(x[i])));", "to_acc(x[i])) + 1);", 1))
    try:
        assert kernels.swap(op) == ["cuda_debug_probe_op::forward_kernel<float>"]
        torch.testing.assert_close(op.cuda_debug_probe(x), before + 1)
    finally:
        kernels.track(op, False)


def test_check_finite_names_the_op_and_the_first_bad_element(tmp_path, cache):
    op_dir = make_probe(tmp_path, "finite_probe")
    jit_loader.load(op_dir)
    x = torch.tensor([1.0, 3e38, 2.0])  # 2 x 3e38 overflows float32
    torch.ops.finite_probe.scale(x, 0)  # unchecked: no error
    with pytest.raises(FloatingPointError, match=r"finite_probe::scale: result 0 \(\(3,\), float32\) "
                                                r"holds 1 NaN/Inf value; the first at index 1 is inf"):
        with jit_loader.check_finite():
            torch.ops.finite_probe.scale(x, 0)
    with jit_loader.check_finite():
        torch.ops.finite_probe.scale(torch.ones(3), 0)  # finite: passes
        torch.log(torch.zeros(1))  # torch's own ops are not checked
    with jit_loader.check_finite(["other"]):
        torch.ops.finite_probe.scale(x, 0)  # another namespace asked for
