"""``jit_loader.profile(fn, *args)``: per kernel a call launches, its time, DRAM bandwidth
and FLOP rate against the device's peaks (a roofline point), occupancy, registers, shared
memory and launch configuration.

Through Nsight Compute where ``ncu`` is installed: the call runs in a fresh process
(jit_tools/tools/fresh_call.py) with the ops' current builds, once to warm up and once
between cudaProfilerStart and Stop, which is what ncu profiles (``--profile-from-start
off``); the metrics are read raw, in base units (jit_tools/tools/kernel_report.py). Clocks
are left as the driver sets them (``--clock-control none``), as in the benchmarks, so the
times compare with theirs. Without ncu (or for a function that cannot travel to another
process), torch.profiler's kernel events in this process: time, grid, block, registers,
shared memory and its estimate of occupancy, and the report says what is missing.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from jit_tools.errors import JitLoaderError
from jit_tools.state import loaded_states
from jit_tools.tools import fresh_call, kernel_report, nvtools
from jit_tools.tools.kernel_report import KernelProfile, ProfileReport

DEFAULT_TIMEOUT = 300.0


def command(exe: str, spec: Path, log: Path, metrics: Sequence[str], clock_control: str) -> list[str]:
    """The ncu command line for a spec of calls."""
    return [exe, "--profile-from-start", "off", "--clock-control", clock_control, "--csv",
            "--page", "raw", "--print-units", "base", "--print-kernel-base", "mangled", "--metrics", ",".join(metrics),
            "--log-file", str(log), sys.executable, "-m", "jit_tools.tools.fresh_call", str(spec)]


def _namespaces(ops: Sequence[Path]) -> list[str]:
    names = [Path(d).name for d in ops]
    for state in loaded_states():
        names += state.namespaces
    return list(dict.fromkeys(names))


def profile(fn, *args, backward: bool | None = None, kwargs: dict | None = None,
            timeout: float = DEFAULT_TIMEOUT, clock_control: str = "none",
            use_ncu: bool | None = None) -> ProfileReport:
    """Profile each kernel ``fn(*args, **kwargs)`` launches (and its backward's, where an
    argument requires grad and ``backward`` is not False).

    With ncu (``use_ncu`` None: where it is found; True: required) the call runs in a fresh
    process (``fn``: a function of an op, a dispatcher op, or a function importable by
    module and name) after one warm-up call; else torch.profiler times it here. The report
    is a table (``report.table()``: a pandas DataFrame where pandas is installed), a
    roofline plot (``report.plot()``) and both in Jupyter."""
    nvtools.needs_gpu("jit_loader.profile")
    kwargs = dict(kwargs or {})
    do_backward = fresh_call.wants_backward(args, kwargs, backward)
    exe = None
    why = None
    if use_ncu is not False:
        try:
            exe = nvtools.find("ncu", "jit_loader.profile")
        except nvtools.ToolMissing as e:
            if use_ncu:
                raise
            why = str(e)
    if exe is not None:
        try:
            target, ops = fresh_call.describe(fn, "profile")
        except TypeError as e:
            if use_ncu:
                raise
            why, exe = str(e), None
    if exe is None:
        return in_process(fn, args, kwargs, do_backward, why)
    label = fresh_call.label_of(fn)
    call = fresh_call.Call(str(label), target, tuple(args), kwargs, do_backward)
    return run_calls([call], ops, exe=exe, timeout=timeout, clock_control=clock_control)


def run_calls(calls: Sequence[fresh_call.Call], ops: Sequence[Path], *, exe: str | None = None,
              timeout: float = DEFAULT_TIMEOUT, clock_control: str = "none") -> ProfileReport:
    """``calls`` in one fresh process under ncu, with the ops' current builds; without
    ncu, in this process under torch.profiler."""
    if exe is None:
        try:
            exe = nvtools.find("ncu", "jit_loader.profile")
        except nvtools.ToolMissing as e:
            return _calls_in_process(calls, ops, str(e))
    options = nvtools.op_options(ops)
    started = time.perf_counter()
    nvtools.ensure_built(options, "profile", timeout)
    with tempfile.TemporaryDirectory(prefix="jit_loader_profile_") as tmp:
        spec = fresh_call.write_spec(Path(tmp), calls, ops, options, "profile")
        log = Path(tmp) / "ncu.csv"
        argv = command(exe, spec, log, kernel_report.METRICS, clock_control)
        left = max(1.0, timeout - (time.perf_counter() - started))
        proc = nvtools.run_tool(argv, nvtools.child_env(), left, "profile (ncu)")
        output = (log.read_text(errors="replace") if log.is_file() else "") or proc.stdout
        result = fresh_call.read_result(spec)
    if result.get("error"):
        raise JitLoaderError(f"profile: the call raised {result['error'].splitlines()[0]}")
    kernels, device = kernel_report.parse_ncu(output, _namespaces(ops))
    if not kernels:
        raise JitLoaderError(
            f"profile: ncu reported no kernel (status {proc.returncode}); its output:\n"
            f"{(output + proc.stdout).strip()[-2000:]}")
    lacking = kernel_report.missing_metrics(output)
    missing = f"ncu gave no {', '.join(lacking)} on this GPU" if lacking else None
    return ProfileReport(kernels=kernels, source="ncu", device=device, missing=missing,
                         command=argv, seconds=time.perf_counter() - started,
                         calls=[c.label for c in calls])


def in_process(fn, args, kwargs, backward: bool, why: str | None) -> ProfileReport:
    """torch.profiler's account of the call's kernels, made in this process after one
    warm-up call."""
    import torch
    from torch.profiler import ProfilerActivity

    started = time.perf_counter()

    def call():
        out = fn(*args, **kwargs)
        if backward:
            fresh_call._run_backward(out)
        torch.cuda.synchronize()

    call()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    namespaces = _namespaces([])
    kernels = []
    for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e.get("ts", 0)):
        a = e.get("args", {})
        name = e.get("name", "")
        grid, block = a.get("grid"), a.get("block")
        kernels.append(KernelProfile(
            kernel=kernel_report.readable(name), op=kernel_report.op_of(name, namespaces),
            duration_us=float(e.get("dur", 0.0)),
            occupancy_pct=a.get("est. achieved occupancy %"),
            registers=a.get("registers per thread"), shared_bytes=a.get("shared memory"),
            grid=f"({','.join(map(str, grid))})" if grid else None,
            block=f"({','.join(map(str, block))})" if block else None, full_name=name))
    missing = ("DRAM bandwidth, FLOP rate and measured occupancy (these need Nsight Compute); "
               + (why or "ncu was not used"))
    return ProfileReport(kernels=kernels, source="torch.profiler",
                         device=torch.cuda.get_device_name(), missing=missing,
                         seconds=time.perf_counter() - started,
                         calls=[getattr(fn, "__name__", repr(fn))])


def _calls_in_process(calls: Sequence[fresh_call.Call], ops: Sequence[Path], why: str) -> ProfileReport:
    """The fallback of :func:`run_calls`: the ops loaded here, the calls one after another
    under torch.profiler."""
    from jit_tools import handle
    handles = {str(d): handle.load_folder(d) for d in ops}
    resolved = [(fresh_call._resolve(c.target, handles), c) for c in calls]

    def all_calls():
        for fn, c in resolved:
            out = fn(*c.args, **c.kwargs)
            if c.backward:
                fresh_call._run_backward(out)

    report = in_process(all_calls, (), {}, False, why)
    report.calls = [c.label for c in calls]
    return report
