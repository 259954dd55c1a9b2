"""The benchmark suite's runner: the cases it is given, timed and checked by one protocol,
into one JSON document (``experiments/bench.py`` finds the cases of every op and is the
suite's command line; each ``experiments/bench_<op>.py`` runs its own cases through
:func:`run_view`). Timing is ``benchutil.measure``: CUDA events after warm-up, median and
IQR of many interleaved repetitions, L2 flush for memory-bound cases, wall clock for
host-bound ones; warnings when the machine is loaded or a spread is wide.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

import torch
from tqdm import tqdm

from experiments import benchutil, suite_report
from experiments.benchutil import COPY, Case, Skipped

SCALES = ("tiny", "quick", "full")

# Copy ceiling: clone() of this many bytes, far beyond any L2 cache on a GPU.
CEILING_BYTES = {"cuda": {"tiny": 64 << 20, "quick": 256 << 20, "full": 512 << 20},
                 "cpu": {"tiny": 4 << 20, "quick": 32 << 20, "full": 64 << 20}}

# Seconds of timing per case (all its implementations together).
BUDGET_S = {"tiny": 0.02, "quick": 0.15, "full": 0.4}

SECTIONS = ("cases", "overhead")

# Call overhead: seconds of one run of back-to-back calls (five runs per implementation);
# the tiny scale (CI) takes a fixed handful of calls instead.
OVERHEAD_RUN_S = {"quick": 0.02, "full": 0.05}

OVERHEAD_CALLS = {"tiny": 10, "min": 20, "max": 5000}

OVERHEAD_RUNS = 5


def steady_state(device: str | None) -> str:
    """A session's steady state: the loader's shared pieces built before the ops load. On a
    fresh cache they would otherwise build in the background while this process times the
    ops, whose register_autograd_op declarations then take the Python path for the whole
    run (README, JIT_LOADER_SHARED_NOW). Returns the device to run on."""
    os.environ.setdefault("JIT_LOADER_SHARED_NOW", "1")
    return device or benchutil.default_device()


def select(found, ops: list[str] | None, skipped: list[Skipped] | None = None,
           family: str | None = None) -> list:
    """The cases of ``found`` whose op is in ``ops`` (all when None), a ``Case`` with its
    plot ``family``; the ``Skipped`` among them go into ``skipped``."""
    cases = []
    for c in found:
        if ops and c.op not in ops:
            continue
        if isinstance(c, Skipped):
            if skipped is not None:
                skipped.append(c)
            continue
        if isinstance(c, Case):
            c.family = c.family or family or c.op
        cases.append(c)
    return cases

def copy_ceiling(device: str, scale: str) -> dict:
    nbytes = CEILING_BYTES[torch.device(device).type][scale]
    buf = torch.empty(nbytes // 2, dtype=torch.uint8, device=device).random_()
    timing = benchutil.measure({"clone": buf.clone}, device, warmup=3,
                               budget_s=BUDGET_S[scale], min_reps=5, max_reps=50)["clone"]
    return {"bytes": nbytes, "gbps": benchutil.gbps(nbytes, timing.median),
            "median_us": timing.median * 1e6, "iqr_us": timing.iqr * 1e6}

def _reason(case: Case, baseline: str, target: float, base_s: float, copy_s: float | None):
    if baseline in case.reasons:
        return case.reasons[baseline]
    if case.bytes and copy_s and baseline != COPY and target * copy_s > base_s:
        return (f"{target:g}x {baseline} would need {100 * target * copy_s / base_s:.0f}% of "
                "the copy bandwidth (clone() of the same bytes)")
    return None

def run_case(case: Case, device: str, scale: str, env: dict, warnings: list[str],
             progress: bool = False, clock=time.perf_counter) -> list[dict]:
    if case.device is not None and case.device != device:
        device = case.device
        env = dict(env, device=benchutil.device_name(device))
    fns = case.build()
    if case.check is not None:
        case.check(fns)
    if case.bytes:
        # The copy speed for this case's own traffic: clone() of bytes/2 (read + write).
        buf = torch.empty(max(1, case.bytes // 2), dtype=torch.uint8, device=device).random_()
        fns[COPY] = buf.clone
    timings = benchutil.measure(fns, device, budget_s=BUDGET_S[scale],
                                min_reps=5 if scale == "tiny" else 10,
                                flush=bool(case.bytes), wall=case.host_bound, clock=clock)
    for name, timing in timings.items():
        message = benchutil.spread_warning(f"{case.label} {name}", timing)
        if message:
            warnings.append(message)
            if progress:
                tqdm.write(f"warning: {message}", file=sys.stderr)
    copy_s = timings[COPY].median if COPY in timings else None
    records = []
    for k, impl in enumerate(case.ours):
        mine = timings[impl]
        for baseline, base in timings.items():
            if baseline in case.ours:
                continue
            ratio = base.median / mine.median
            target = case.targets.get(baseline) if k == 0 else None
            met = None if target is None else bool(ratio >= target)
            records.append({
                "op": case.op, "pass": case.pass_, "shape": case.shape, "dtype": case.dtype,
                "impl": impl, "device": env["device"], "torch": env["torch"], "date": env["date"],
                "median_us": mine.median * 1e6, "iqr_us": mine.iqr * 1e6, "spread": mine.spread,
                "reps": mine.reps, "wall_us": None if mine.wall is None else mine.wall * 1e6,
                "gbps": benchutil.gbps(case.bytes, mine.median) if case.bytes else None,
                "flops_per_s": case.flops / mine.median if case.flops else None,
                "copy_gbps": benchutil.gbps(case.bytes, copy_s) if copy_s else None,
                "baseline": baseline, "baseline_us": base.median * 1e6,
                "baseline_iqr_us": base.iqr * 1e6,
                "baseline_wall_us": None if base.wall is None else base.wall * 1e6,
                "ratio": ratio, "wall_ratio": None if mine.wall is None else base.wall / mine.wall,
                "target": target, "met": met,
                "reason": None if met in (None, True) else
                _reason(case, baseline, target, base.median, copy_s),
            })
    return records

def run_overhead_case(case, scale: str, cpu_time: bool = False) -> dict:
    """One call-overhead row: ``benchutil.host_time`` of our call and the native twin's.
    ``cpu_time``: CPU rows are timed by the calling thread's CPU time (a loaded machine)."""
    ours, native = case.build()
    fns = {"ours": ours, "native": native}
    clock = time.thread_time if cpu_time and case.device == "cpu" else time.perf_counter
    if scale == "tiny":
        calls, warmup = OVERHEAD_CALLS["tiny"], 3
    else:  # as many calls as fill a run of OVERHEAD_RUN_S with the slower of the two
        probe = benchutil.host_time(fns, case.device, calls=20, runs=3, warmup=20, clock=clock)
        once = max(t.best for t in probe.values()) * case.ops_per_call
        calls = int(min(OVERHEAD_CALLS["max"], max(OVERHEAD_CALLS["min"],
                                                    OVERHEAD_RUN_S[scale] / once)))
        warmup = 10
    timing = benchutil.host_time(fns, case.device, calls=calls, runs=OVERHEAD_RUNS,
                                 warmup=warmup, ops_per_call=case.ops_per_call, clock=clock)
    mine, base = timing["ours"], timing["native"]
    ratio = mine.best / base.best
    return {"op": case.op, "pass": case.pass_, "mode": case.mode, "shape": case.shape,
            "dtype": case.dtype, "device": benchutil.device_name(case.device),
            "ours": case.ours, "native": case.native, "calls": calls, "runs": mine.runs,
            "ours_us": mine.best * 1e6, "native_us": base.best * 1e6,
            "ours_median_us": mine.median * 1e6, "native_median_us": base.median * 1e6,
            "ratio": ratio, "limit": case.limit,
            "within": None if case.limit is None else bool(ratio <= case.limit)}


def run(device: str | None, scale: str, cases: list, overhead: list = (), ops: list[str] | None = None,
        out_dir: str | Path | None = None, progress: bool = True, command: str | None = None,
        sections=SECTIONS, cpu_time: bool = False, clock=time.perf_counter,
        found_errors: list[str] = (), skipped: list[Skipped] = (), benchmark: str = "suite") -> dict:
    """Run ``cases`` and the call-overhead rows ``overhead`` (those of ``sections``, of
    ``ops`` when given); returns the JSON document (and writes the files into ``out_dir``
    when given). ``cpu_time``: the overhead section's CPU rows are timed by thread CPU time
    instead of the wall clock; ``clock``: the cases' CPU timer (``benchutil.measure``).
    ``found_errors``, ``skipped``: what finding the cases met; ``benchmark``: the document's
    name on the results page (experiments/results.py)."""

    assert scale in SCALES, scale
    assert set(sections) <= set(SECTIONS), sections
    device = steady_state(device)
    started = time.perf_counter()
    env = benchutil.run_header(device)
    warnings, errors = [], []
    message = benchutil.load_warning()
    if message:
        warnings.append(message)
    errors += found_errors
    skipped = list(skipped)
    cases = select(cases, ops, skipped) if "cases" in sections else []
    overhead = select(overhead, ops, skipped) if "overhead" in sections else []
    warnings += [s.message for s in skipped]
    known = {c.op for c in cases + overhead} | {s.op for s in skipped}
    errors += [f"no benchmark case for op {op!r}" for op in ops or [] if op not in known]
    ceiling = copy_ceiling(device, scale) if "cases" in sections else None
    records, rows = [], []
    # The plain text bar (not tqdm.auto): Jupyter shows it too, without ipywidgets.
    bar = tqdm(cases, desc="bench", unit="case", disable=not progress, file=sys.stderr)
    for case in bar:
        bar.set_postfix_str(case.label, refresh=True)
        try:
            records += run_case(case, device, scale, env, warnings, progress, clock)
        except Exception as e:
            errors.append(f"{case.label}: {type(e).__name__}: {e}")
            traceback.print_exc()
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        _save_partial(out_dir, env, errors, records, rows)
    bar = tqdm(overhead, desc="overhead", unit="case", disable=not progress, file=sys.stderr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one CPU thread: the host cost of a call, not of a parallel region
    for case in bar:
        bar.set_postfix_str(case.label, refresh=True)
        try:
            rows.append(run_overhead_case(case, scale, cpu_time))
        except Exception as e:
            errors.append(f"{case.label}: {type(e).__name__}: {e}")
            traceback.print_exc()
        _save_partial(out_dir, env, errors, records, rows)
    torch.set_num_threads(threads)
    message = benchutil.load_warning()  # load that arrived during the run counts too
    if message and message not in warnings:
        warnings.append(message)
    doc = {"benchmark": benchmark, "environment": env, "scale": scale, "sections": list(sections),
           "ops": sorted({c.op for c in cases + overhead}),
           "families": {c.op: c.family for c in cases},
           "cases": len(cases), "elapsed_s": time.perf_counter() - started,
           "copy_ceiling": ceiling, "warnings": warnings, "errors": errors, "records": records,
           "overhead": rows, "overhead_cpu_clock": "thread CPU" if cpu_time else "wall-clock",
           "autograd_op_path": autograd_op_path() if overhead else None,
           "command": command}
    if out_dir is not None:
        suite_report.write_outputs(doc, out_dir)
    return doc


def autograd_op_path() -> str:
    """What serves the ``register_autograd_op`` declarations of the ops this process loaded
    (sigmoid, GELU, resize, ROIAlign): the loader's C++ autograd kernel, or the Python path
    where that piece is not built."""
    from jit_tools import autograd

    if autograd.cpp_library() is not None:
        return "the loader's C++ autograd kernel"
    return "torch.library.register_autograd (the C++ autograd piece is not built)"

def _save_partial(out_dir, env, errors, records, rows) -> None:
    """What was measured survives an interrupted run."""
    if out_dir is None:
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "bench.json").write_text(json.dumps(
        {"environment": env, "partial": True, "errors": errors, "records": records,
         "overhead": rows}, indent=1))


# ------------------------------------------------------------------------ per-op views


def view_parser(doc: str) -> argparse.ArgumentParser:
    """The command line every per-op script shares; a script adds its own flags."""
    parser = argparse.ArgumentParser(
        description=doc.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The suite's cases of this op (python -m experiments.bench), timed and checked "
               "as the suite does.")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when visible)")
    parser.add_argument("--quick", action="store_true", help="the suite's quick sizes")
    parser.add_argument("--tiny", action="store_true", help="the suite's tiny sizes (CI on a CPU)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the run here (bench.json's format: --render reads it)")
    parser.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="CPU with --threads 1: time by the thread's CPU time (a loaded machine)")
    parser.add_argument("--no-compile", action="store_true",
                        help="leave out the torch.compile baselines")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser

def _without_compile(case: Case) -> Case:
    def build(build=case.build):
        return {k: v for k, v in build().items() if "torch.compile" not in k}
    return dataclasses.replace(case, build=build, targets={
        k: v for k, v in case.targets.items() if "torch.compile" not in k})

def run_view(args: argparse.Namespace, cases, name: str, ops: list[str] | None = None) -> int:
    """A per-op script's run: ``cases(device, scale)`` (its ``suite_cases``, perhaps with
    its own options) through the suite, printed as one table; ``ops`` selects among them.
    Returns the exit status (non-zero when a check failed or a case raised)."""
    if args.cpu_time and args.threads != 1:
        raise SystemExit("--cpu-time needs --threads 1 (other threads' work is not the "
                         "caller's CPU time)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or benchutil.default_device()
    scale = "tiny" if args.tiny else "quick" if args.quick else "full"
    found = [c if isinstance(c, Skipped) or not args.no_compile else _without_compile(c)
             for c in cases(device, scale)]
    for c in found:
        if isinstance(c, Case):
            c.family = name
    command = f"python -m experiments.bench_{name} " + shlex.join(sys.argv[1:])
    clock = time.thread_time if args.cpu_time else time.perf_counter
    doc = run(device, scale, found, ops=ops, progress=not args.no_progress, command=command,
              sections=("cases",), clock=clock, benchmark=f"bench_{name}")
    print(suite_report.render_view(doc, name))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if doc["errors"] else 0
