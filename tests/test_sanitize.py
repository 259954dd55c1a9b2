"""jit_loader.sanitize and ``python -m jit_loader sanitize``: one call of an op in a fresh
process under compute-sanitizer, with the op's debug build.

Without a GPU: what can travel to the fresh process and what cannot (with the message),
the tool's and the GPU's absence said clearly, the op's check cases and their input
variants, and the whole path through a stand-in for compute-sanitizer that records how it
was started and runs the program it is given (the call itself runs on the CPU in the
fresh process, with the debug build, which is built before and outside the tool). On a
GPU: a planted out-of-bounds write and a planted shared-memory race in a scaffolded op
reported at the lines where they were planted, and every bundled op clean under memcheck,
racecheck and initcheck for its check cases, forward and backward, in every input variant.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest
import torch

import jit_loader
from experiments import planted_bugs
from jit_tools import sources
from jit_tools.tools import fresh_call, nvtools, op_cases, sanitize
from jit_tools.tools import scaffold
from tests.subproc import private_env, run_interpreter
from tests.test_debug_build import make_probe


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JIT_LOADER_DEBUG", raising=False)
    return tmp_path / "cache"


def test_an_unknown_tool_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"tool must be one of memcheck, racecheck, initcheck, "
                                         r"synccheck, got 'leakcheck'"):
        jit_loader.sanitize(torch.sigmoid, torch.ones(2), tool="leakcheck")


def test_a_function_that_cannot_travel_says_what_can():
    with pytest.raises(TypeError, match="cannot be called in a fresh process: pass a function of an op"):
        jit_loader.sanitize(lambda x: x * 2, torch.ones(2))

    def local(x):
        return x
    with pytest.raises(TypeError, match="a lambda or a function defined in a notebook"):
        fresh_call.describe(local, "profile")


def test_what_travels_surface_functions_dispatcher_ops_and_importable_functions(tmp_path, cache):
    op_dir = make_probe(tmp_path, "travel_probe")
    jit_loader.load(op_dir)
    target, ops = fresh_call.describe(torch.ops.travel_probe.scale, "sanitize")
    assert target == {"kind": "torch_op", "name": "travel_probe::scale.default"} and ops == [op_dir]
    assert fresh_call.describe(torch.ops.travel_probe.scale.default, "x")[0] == target
    target, _ = fresh_call.describe(torch.sigmoid, "sanitize")
    assert target == {"kind": "import", "module": "torch", "qualname": "sigmoid"}
    sigmoid = jit_loader.load("sigmoid")
    target, ops = fresh_call.describe(sigmoid.sigmoid, "sanitize")
    assert target == {"kind": "surface", "op": str(sources.OPS_DIR.resolve() / "sigmoid"), "name": "sigmoid"}
    assert ops == [sources.OPS_DIR.resolve() / "sigmoid"]


def test_backward_runs_where_an_argument_requires_grad_unless_told():
    x = torch.ones(3, requires_grad=True)
    assert fresh_call.wants_backward((x,), {}, None)
    assert not fresh_call.wants_backward((x.detach(),), {}, None)
    assert fresh_call.wants_backward(([x.detach(), x],), {}, None)  # inside a list
    assert not fresh_call.wants_backward((x,), {}, False)


def test_without_compute_sanitizer_the_error_says_where_it_looked_and_how_to_get_it(monkeypatch):
    monkeypatch.setattr(nvtools, "candidates", lambda tool: [])
    with pytest.raises(nvtools.ToolMissing) as info:
        sanitize.run_calls([], [], "memcheck")
    message = str(info.value)
    assert message.startswith("compute-sanitizer was not found (looked in PATH,")
    assert "JIT_LOADER_COMPUTE_SANITIZER" in message and "nvidia-cuda-sanitizer-api" in message


@pytest.mark.skipif(any(os.path.isfile(p) for p in nvtools.candidates("compute-sanitizer")),
                    reason="compute-sanitizer is installed here")
def test_the_command_line_says_so_too_where_it_is_missing(cache):
    out = run_interpreter("-m", "jit_loader", "sanitize", "sigmoid", env=private_env(cache))
    assert out.returncode == 1
    assert out.stderr.startswith("sanitize: compute-sanitizer was not found"), out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
def test_without_a_gpu_the_error_says_so(monkeypatch, tmp_path):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JIT_LOADER_COMPUTE_SANITIZER", str(fake))
    with pytest.raises(jit_loader.JitLoaderError, match="no CUDA GPU is visible .* jit_loader.sanitize runs"):
        sanitize.run_calls([], [], "memcheck")


def test_check_cases_and_their_variants_keep_the_values_and_change_the_layout():
    calls = op_cases.op_calls(sources.OPS_DIR / "lltm", "cpu", op_cases.VARIANTS, [torch.float32])
    by_variant = {c.label.split(", ")[-1].rstrip("]"): c for c in calls if "function" in c.label}
    declared, strided, offset = by_variant["declared"], by_variant["noncontiguous"], by_variant["offset"]
    assert all(c.backward for c in calls) and declared.target["name"] == "lltm"
    for a, b, c in zip(declared.args, strided.args, offset.args):
        assert torch.equal(a, b) and torch.equal(a, c)
        assert a.requires_grad == b.requires_grad == c.requires_grad
    assert not any(t.is_contiguous() for t in strided.args if t.dim() > 0)
    assert all(t.data_ptr() % 16 == 4 for t in offset.args)  # one float past an aligned start
    # lltm's batch is its input's leading size: input, old_h and old_cell are cut, the
    # weights and bias not.
    empty, one = by_variant["empty"].args, by_variant["one"].args
    assert [t.shape[0] for t in empty] == [0, declared.args[1].shape[0], declared.args[2].shape[0], 0, 0]
    assert [t.shape[0] for t in one][0::3] == [1, 1]
    # roi_align: its regions are cut, not the feature map they index
    rois = [c for c in op_cases.op_calls(sources.OPS_DIR / "detection", "cpu", ["empty"], cases=["roi_align"])]
    assert rois and all(c.args[0].shape[0] == 2 and c.args[1].shape[0] == 0 for c in rois)


def test_unknown_cases_and_variants_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="has no case 'nope'; its cases: 'function'"):
        op_cases.op_calls(sources.OPS_DIR / "sigmoid", "cpu", cases=["nope"])
    with pytest.raises(ValueError, match="unknown variant 'sideways'"):
        op_cases.op_calls(sources.OPS_DIR / "sigmoid", "cpu", ["sideways"])


# A stand-in for compute-sanitizer: records its command line and environment, runs the
# program after its options, and prints a clean summary as the tool does.
FAKE_TOOL = """\
#!{python}
import json, os, subprocess, sys
argv = sys.argv[1:]
program = argv.index({python!r})
with open({record!r}, "w") as f:
    json.dump({{"argv": argv, "env": {{k: os.environ.get(k) for k in (
        "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "JIT_LOADER_DEBUG")}}}}, f)
print("========= COMPUTE-SANITIZER", flush=True)
status = subprocess.run(argv[program:]).returncode
print("========= ERROR SUMMARY: 0 errors")
sys.exit(status)
"""


def test_a_call_runs_in_a_fresh_process_with_the_debug_build_under_the_tool(tmp_path, cache, monkeypatch):
    op_dir = make_probe(tmp_path, "fresh_probe")
    jit_loader.load(op_dir)  # this process: the release build
    record = tmp_path / "record.json"
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE_TOOL.format(python=sys.executable, record=str(record)))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JIT_LOADER_COMPUTE_SANITIZER", str(fake))
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:64")
    monkeypatch.setattr(nvtools, "needs_gpu", lambda what_for: None)  # the call runs on the CPU here
    x = torch.tensor([1.0, 2.0, 3.0])
    report = jit_loader.sanitize(torch.ops.fresh_probe.scale, x, 0, tool="racecheck")
    assert report.clean, str(report)
    assert str(report).startswith("compute-sanitizer racecheck: clean, nothing found (1 call,")
    seen = json.loads(record.read_text())
    assert seen["argv"][:4] == ["--tool", "racecheck", "--target-processes", "application-only"]
    assert seen["env"] == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                           "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64", "JIT_LOADER_DEBUG": "1"}
    # The fresh process ran the debug build: its index check raises there, not here.
    report = jit_loader.sanitize(torch.ops.fresh_probe.scale, x, 1)
    assert not report.clean
    assert "index i + offset = 3 is outside [0, 3)" in report.call_error
    assert "fresh_probe::scale" in report.call_error  # the call it was in
    assert jit_loader.op_key(op_dir, debug=True)[0] in [b["key"] for b in jit_loader.cached_builds("fresh_probe")]
    torch.testing.assert_close(torch.ops.fresh_probe.scale(x, 0), x * 2)  # this process: unchanged


# ---- on a GPU ------------------------------------------------------------------------------

def scaffolded(tmp_path, name):
    """A scaffolded CUDA op; each test names its own (op names are process-wide, and one
    worker may run both tests)."""
    return scaffold.create(name, tmp_path, cuda=True).op_dir


@pytest.mark.cuda
def test_a_planted_out_of_bounds_write_is_reported_at_its_line(tmp_path, cache):
    op_dir = scaffolded(tmp_path, "planted_oob")
    lines = planted_bugs.plant(op_dir, "oob")
    op = jit_loader.load(op_dir)
    report = jit_loader.sanitize(op.planted_oob, torch.randn(4096, device="cuda"))
    assert not report.clean
    found = report.findings[0]
    cu = str(planted_bugs.kernel_file(op_dir).resolve())
    assert found.kind == "Invalid __global__ write" and found.access_size == 4
    assert (found.where.file, found.where.line) == (cu, lines["write"])
    assert "planted_oob_op::forward_kernel<float>" in found.kernel
    assert found.thread is not None and found.block is not None
    assert "after" in (found.relation or "")
    assert "y[i + 1]" in found.excerpt
    # Fixed live: the next call runs the new build, and it is clean.
    planted_bugs.fix(op_dir)
    op.reload()
    assert jit_loader.sanitize(op.planted_oob, torch.randn(4096, device="cuda")).clean


@pytest.mark.cuda
def test_a_planted_shared_memory_race_is_reported_at_its_lines(tmp_path, cache):
    op_dir = scaffolded(tmp_path, "planted_race")
    lines = planted_bugs.plant(op_dir, "race")
    op = jit_loader.load(op_dir)
    report = jit_loader.sanitize(op.planted_race, torch.randn(4096, device="cuda"), tool="racecheck",
                                 backward=False)
    assert not report.clean, report.output
    cu = str(planted_bugs.kernel_file(op_dir).resolve())
    named = {(f.file, f.line) for finding in report.findings for f in finding.frames}
    assert {(cu, lines["write"]), (cu, lines["read"])} <= named, str(report)
    assert all(f.kind.startswith("Race") for f in report.findings)


CUDA_OPS = [op for op in jit_loader.available_ops() if any((sources.OPS_DIR / op).glob("*.cu"))]


@pytest.mark.cuda
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "initcheck"])
@pytest.mark.parametrize("op", CUDA_OPS)
def test_every_bundled_op_is_clean_for_its_cases_in_every_variant(op, tool):
    op_dir = sources.OPS_DIR / op
    calls = op_cases.op_calls(op_dir, "cuda", op_cases.VARIANTS)
    report = sanitize.run_calls(calls, [op_dir], tool)
    assert report.clean, str(report)
