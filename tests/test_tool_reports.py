"""The parsers of compute-sanitizer's and ncu's output, against real outputs.

tests/fixtures/sanitizer/recorded/ holds what compute-sanitizer 2025.3.1 and Nsight Compute
2025.3.1 printed on an H200 (versions.txt) for the planted op of
tests/fixtures/sanitizer/planted_cuda.cu, each beside the command that printed it (*.cmd;
RECORD.sh ran them all). The bugs' lines are read from the "planted:" markers of that
file, not written here. The recordings name the op folder the recording used.
"""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import pytest

from jit_tools.tools import kernel_report, sanitizer_report

HERE = Path(__file__).resolve().parent / "fixtures" / "sanitizer"
RECORDED = HERE / "recorded"
RECORDED_OP = "/tmp/record.vngn8m/ops/planted"  # the op folder as the recordings name it
SOURCE = HERE / "planted_cuda.cu"


def recorded(name: str) -> str:
    return gzip.open(RECORDED / f"{name}.gz", "rt").read()


def marker(text: str) -> int:
    """The line of planted_cuda.cu holding ``text`` (a "planted:" marker)."""
    lines = SOURCE.read_text().splitlines()
    (found,) = [i + 1 for i, line in enumerate(lines) if text in line]
    return found


def report(name: str, op_dir: str = RECORDED_OP):
    tool = name.split("_")[0]
    return sanitizer_report.parse(tool, recorded(f"{name}.txt"), [Path(op_dir)])


@pytest.mark.parametrize("name", ["memcheck_clean", "memcheck_backward_clean", "racecheck_clean",
                                  "initcheck_clean", "synccheck_clean"])
def test_a_clean_run_says_so(name):
    r = report(name)
    assert r.clean and r.findings == [] and r.summary == 0
    assert str(r).startswith(f"compute-sanitizer {name.split('_')[0]}: clean, nothing found")


def test_an_out_of_bounds_write_at_the_planted_line():
    r = report("memcheck_oob")
    assert not r.clean and r.summary == 4
    (f,) = r.findings
    assert (f.kind, f.severity, f.access_size) == ("Invalid __global__ write", "error", 4)
    assert (f.where.file, f.where.line) == (f"{RECORDED_OP}/planted_cuda.cu", marker("planted: oob"))
    assert f.kernel == "planted_op::oob_kernel<float>"
    assert (f.thread, f.block) == ((255, 0, 0), (15, 0, 0))
    assert re.fullmatch(r"0x[0-9a-f]+", f.address)
    assert f.relation.startswith("is out of bounds and is 1 bytes after the nearest allocation at 0x")
    assert f.relation.endswith("of size 16,384 bytes")  # 4096 floats: the output, one past its end
    # The launcher that started the kernel, from the host backtrace: the oob branch.
    assert f.launched_from.line == marker('planted("oob")') and "launch_forward" in f.launched_from.function
    # What failed after it: the debug build's wait for the kernel, then the frees.
    assert any("cudaErrorLaunchFailure" in e and "cudaStreamSynchronize" in e for e in r.run_errors)


def test_the_excerpt_shows_the_op_s_own_line(tmp_path):
    op_dir = tmp_path / "planted"
    op_dir.mkdir()
    shutil.copy(SOURCE, op_dir / "planted_cuda.cu")
    text = recorded("memcheck_oob.txt").replace(RECORDED_OP, str(op_dir))
    (f,) = sanitizer_report.parse("memcheck", text, [op_dir]).findings
    line = marker("planted: oob")
    marked = [l for l in f.excerpt.splitlines() if l.startswith(">")]
    assert marked == [f"> {line:5d} | {SOURCE.read_text().splitlines()[line - 1]}"]
    assert len(f.excerpt.splitlines()) == 5
    html = sanitizer_report.parse("memcheck", text, [op_dir])._repr_html_()
    assert "planted_op::oob_kernel&lt;float&gt;" in html and "y[i + 1]" in html


def test_with_the_caching_allocator_on_the_same_write_goes_unseen():
    # Why sanitize runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1: the same kernel, the same
    # call, under memcheck with the allocator on.
    assert report("memcheck_cached_oob").clean
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" not in (RECORDED / "memcheck_cached_oob.cmd").read_text()
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in (RECORDED / "memcheck_oob.cmd").read_text()


def test_a_shared_memory_race_names_both_lines():
    r = report("racecheck_race")
    assert r.summary == 1
    (f,) = r.findings
    assert (f.kind, f.severity, f.hazards) == ("Race between Write and Read access", "error", 16384)
    assert [(s.file.rsplit("/", 1)[1], s.line) for s in f.frames] == [
        ("planted_cuda.cu", marker("planted: race write")), ("planted_cuda.cu", marker("planted: race read"))]
    assert f.where.line == marker("planted: race write") and f.kernel == "planted_op::race_kernel<float>"


def test_racecheck_hazards_of_one_pair_of_lines_are_one_finding():
    r = report("racecheck_all_race")  # --racecheck-report all: every hazard, 20 printed
    (f,) = r.findings
    assert f.severity == "warning" and "Potential RAW hazard" in f.kind
    assert f.count == 20 and f.thread is not None and f.block is not None
    assert {s.line for s in f.frames} == {marker("planted: race write"), marker("planted: race read")}


def test_an_uninitialised_read_at_the_planted_line():
    r = report("initcheck_uninit")
    (f,) = r.findings
    assert (f.kind, f.access_size) == ("Uninitialized __global__ memory read", 4)
    assert f.where.line == marker("planted: uninit") and f.count == 20
    assert r.summary == 4076  # one per element the kernel read: print-limit shows 20
    assert "the tool counted 4076 errors, printed 20" in str(r).splitlines()[0]


def test_a_barrier_error_inside_an_inlined_intrinsic_is_placed_at_the_kernel_line():
    (f,) = report("synccheck_syncmask").findings
    assert f.kind == "Barrier error. Invalid arguments"
    assert f.frames[0].file.endswith("sm_30_intrinsics.hpp")  # where __syncwarp is
    assert f.where.line == marker("planted: syncmask") and f.kernel == "planted_op::syncmask_kernel<float>"
    # Without the op's folder the first line named is all there is.
    assert report("synccheck_syncmask", "/elsewhere").findings[0].where == f.frames[0]


def test_a_divergent_syncthreads_is_no_error_on_this_gpu():
    # Since Volta a barrier waits for the threads that have not exited: synccheck is clean.
    assert report("synccheck_diverge").clean


def test_a_program_that_never_used_cuda_is_not_called_clean():
    r = sanitizer_report.parse("memcheck", recorded("no_cuda.txt"))
    assert not r.clean and r.run_errors == ["Target application terminated before first instrumented API call"]


# ---- ncu ------------------------------------------------------------------------------------

def test_ncu_rows_give_time_bandwidth_flops_and_launch_per_kernel():
    output = recorded("ncu_raw.csv")
    kernels, device = kernel_report.parse_ncu(output, ["planted", "sigmoid"])
    assert device == "NVIDIA H200"
    names = [k.kernel for k in kernels]
    assert names[0] == "planted_op::forward_kernel<float>"
    # forward, backward (ones_like's fill, the op's backward, the gradient's accumulation),
    # the bundled sigmoid, torch.sigmoid
    assert [k.op for k in kernels] == ["planted", "torch", "planted", "torch", "sigmoid", "torch"]
    assert names[2] == "planted_op::backward_kernel<float>"
    k = kernels[0]
    assert (k.duration_us, k.registers, k.shared_bytes, k.grid, k.block) == (33.6, 28, 0, "(1056,1,1)", "(256,1,1)")
    assert k.dram_bytes == 67_119_360 + 44_595_200
    # The bandwidth computed from bytes and time is ncu's own dram__bytes.sum.per_second.
    assert k.bandwidth_gbs == pytest.approx(3_324_838_095_238.10 / 1e9, rel=1e-6)
    assert k.peak_bandwidth_gbs == pytest.approx(1504 * 3_196_587_301.59 / 1e9)  # about 4.8 TB/s
    # y = x * |x|: one float multiply per element, no FMA; the FP32 peak is twice the FMA rate.
    assert k.flops == 16_777_216 and k.precision == "fp32"
    assert k.peak_gflops == pytest.approx(2 * 16_896 * 1_965_298_971.86 / 1e9)
    assert k.intensity == pytest.approx(16_777_216 / k.dram_bytes)
    assert (k.occupancy_pct, k.theoretical_occupancy_pct, k.waves) == (91.38, 100.0, 1.0)
    assert kernel_report.missing_metrics(output) == []


def test_mangled_kernel_names_are_demangled_and_attributed_to_their_op():
    # profile asks ncu for mangled names (its default name drops the namespaces of kernels
    # launched from an NVRTC module); the same kernel reads as in the demangled recording.
    kernels, _ = kernel_report.parse_ncu(recorded("ncu_raw_mangled.csv"), ["planted"])
    assert [(k.op, k.kernel) for k in kernels] == [("planted", "planted_op::forward_kernel<float>")]
    assert kernel_report.demangle("not_mangled<4>") == "not_mangled<4>"
    assert kernel_report.demangle("_Zgarbage") == "_Zgarbage"


def test_a_metric_ncu_does_not_know_is_named_as_missing():
    output = recorded("ncu_badmetric.csv")  # asked for no__such_metric.sum: ncu says nothing
    assert kernel_report.missing_metrics(output, ["gpu__time_duration.sum", "no__such_metric.sum"]) == [
        "no__such_metric.sum"]
    kernels, _ = kernel_report.parse_ncu(output)
    assert len(kernels) == 1 and kernels[0].duration_us == 2.944 and kernels[0].bandwidth_gbs is None


def test_the_report_renders_a_table_text_and_a_roofline():
    kernels, device = kernel_report.parse_ncu(recorded("ncu_raw.csv"), ["planted", "sigmoid"])
    r = kernel_report.ProfileReport(kernels=kernels, source="ncu", device=device)
    rows = r.table() if isinstance(r.table(), list) else r.table().to_dict("records")
    assert rows[0]["kernel"] == "planted_op::forward_kernel<float>" and rows[0]["duration_us"] == 33.6
    text = str(r)
    assert text.startswith(f"ncu: {len(kernels)} kernel launches on NVIDIA H200")
    assert "planted_op::forward_kernel<float>" in text
    assert r.kernel("sigmoid_op").op == "sigmoid"
    ax = r.plot()
    assert ax.get_xscale() == "log" and len(ax.collections) == sum(1 for k in kernels if k.intensity and k.gflops)
    assert '<img src="data:image/png;base64,' in r._repr_html_()


# A stand-in for ncu: records its command line, runs the program after its options, and
# writes a recorded CSV to --log-file as ncu does.
FAKE_NCU = """\
#!{python}
import gzip, json, subprocess, sys
argv = sys.argv[1:]
program = argv.index({python!r})
with open({record!r}, "w") as f:
    json.dump(argv, f)
status = subprocess.run(argv[program:]).returncode
with open(argv[argv.index("--log-file") + 1], "w") as f:
    f.write(gzip.open({csv!r}, "rt").read())
sys.exit(status)
"""


def test_profile_runs_the_call_twice_in_a_fresh_process_under_ncu(tmp_path, monkeypatch):
    import json
    import sys

    import torch

    import jit_loader
    from jit_tools.tools import fresh_call, nvtools, profile
    from tests.test_debug_build import make_probe

    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JIT_LOADER_DEBUG", raising=False)
    op_dir = make_probe(tmp_path, "ncu_probe")
    jit_loader.load(op_dir)
    record, fake = tmp_path / "argv.json", tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, record=str(record),
                                    csv=str(RECORDED / "ncu_raw.csv.gz")))
    fake.chmod(0o755)
    monkeypatch.setenv("JIT_LOADER_NCU", str(fake))
    monkeypatch.setattr(nvtools, "needs_gpu", lambda what_for: None)  # the call runs on the CPU here
    seen = {}
    real_read = fresh_call.read_result
    monkeypatch.setattr(fresh_call, "read_result", lambda spec: seen.setdefault("result", real_read(spec)))
    r = jit_loader.profile(torch.ops.ncu_probe.scale, torch.ones(3), 0)
    argv = json.loads(record.read_text())
    assert argv[:4] == ["--profile-from-start", "off", "--clock-control", "none"]
    assert argv[argv.index("--metrics") + 1].split(",") == list(profile.kernel_report.METRICS)
    assert seen["result"]["made"] == 2 and seen["result"]["error"] is None  # warm-up, then profiled
    assert r.source == "ncu" and r.kernels[0].kernel == "planted_op::forward_kernel<float>"
    assert r.calls == ["ncu_probe::scale.default"] and r.missing is None


def test_a_process_that_died_unwinding_is_reported_by_its_own_last_words():
    from jit_tools.tools import sanitize
    # After the fault, an exception thrown while unwinding (a tensor's free fails on the
    # dead context) ends the recorded process: its what() is the call's error.
    assert sanitize._program_error(recorded("memcheck_oob.txt")) == "CUDA error: unspecified launch failure"


# ---- on a GPU: the profile's figures ----------------------------------------------------------

@pytest.mark.cuda
def test_profile_of_sigmoid_gives_figures_within_the_device_s_limits():
    import torch

    import jit_loader
    from jit_tools.tools import nvtools
    try:
        nvtools.find("ncu", "test")
    except nvtools.ToolMissing:
        pytest.skip("ncu is not installed here")
    sigmoid = jit_loader.load("sigmoid")
    x = torch.randn(2**24, device="cuda")
    r = jit_loader.profile(sigmoid.sigmoid, x)
    ours = [k for k in r.kernels if k.op == "sigmoid"]
    assert len(ours) == 1, [(k.op, k.kernel) for k in r.kernels]
    (k,) = ours
    ideal = 2 * x.numel() * 4  # read x, write y
    # DRAM traffic is the tensors' (part of the output may still sit in L2 at the end).
    assert 0.7 * ideal <= k.dram_bytes <= 1.05 * ideal
    assert 0 < k.bandwidth_gbs <= 1.02 * k.peak_bandwidth_gbs
    assert k.flops > 0 and 0 < k.gflops <= k.peak_gflops and k.intensity < 10  # memory-bound
    assert 0 < k.occupancy_pct <= 100 and 0 < k.theoretical_occupancy_pct <= 100
    assert k.registers > 0 and k.grid and k.block and r.device == torch.cuda.get_device_name()
    assert r.missing is None and r.source == "ncu"


@pytest.mark.cuda
def test_profile_without_ncu_times_the_kernels_and_says_what_is_missing():
    import torch

    import jit_loader
    sigmoid = jit_loader.load("sigmoid")
    r = jit_loader.profile(sigmoid.sigmoid, torch.randn(2**20, device="cuda"), use_ncu=False)
    assert r.source == "torch.profiler" and "DRAM bandwidth" in r.missing
    (k,) = [k for k in r.kernels if k.op == "sigmoid"]
    assert k.duration_us > 0 and k.bandwidth_gbs is None and k.grid and k.block
