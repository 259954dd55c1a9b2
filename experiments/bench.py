"""The benchmark suite: every op against its baselines on this machine's device, in one command.

    python -m experiments.bench                       # full sizes (GPU if visible, else CPU)
    python -m experiments.bench --quick               # smaller sizes, fewer repetitions
    python -m experiments.bench --ops gelu,lltm --out DIR
    python -m experiments.bench --render DIR/bench.json --results   # Markdown for RESULTS.md
    python -m experiments.bench --only overhead       # one section: cases or overhead

Two sections. ``cases``: every op against its baselines at several sizes (below).
``overhead``: the host time of one call of every op's Python function against its native
twin on tiny inputs, forward and forward+backward, CPU and (where the suite runs on a GPU)
CUDA, plus CUDA graph rows that show the floor (``experiments/bench_overhead.py``).

It writes into ``--out`` (default ``experiments/out/bench/``):

* ``bench.json``: ``environment`` (device, torch, CUDA, date, load), ``copy_ceiling``,
  ``warnings``, ``errors`` and ``records``: one per case, our implementation and
  baseline, with the fields of ``benchutil.RECORD_FIELDS`` (checked by
  ``benchutil.validate_record``);
* ``ratios.png``: one panel per op family (the script that defines the cases): per case
  (pass, size, dtype), the ratio to each baseline on a log axis (1 marked; > 1: ours
  faster), targets drawn as ticks, missed ones in red;
* ``bandwidth.png``: one panel per family with memory-bound cases: achieved GB/s next to
  ``clone()`` at the same traffic and the copy ceiling (a large ``clone()``), all from the
  same run;
* ``summary.md``: the targets (met / NOT MET, with the reason where one is out of
  reach) and every record as a table;
* in ``bench.json`` also ``overhead``: one row per call-overhead case, with the fields
  of ``benchutil.OVERHEAD_FIELDS`` (checked by ``benchutil.validate_overhead_row``), and
  its table in ``summary.md``. A run of the overhead section alone writes no plots.

Timing is ``benchutil.measure``: CUDA events after warm-up, median and IQR of many
interleaved repetitions, L2 flush for memory-bound cases, wall clock for host-bound ones;
warnings when the machine is loaded or a spread is wide. The exit status is non-zero
when a case failed its correctness check or raised; a missed target is reported, not
an error.

Adding an op (one registration): in its script ``experiments/bench_<op>.py`` define

    def suite_cases(device: str, scale: str) -> list[benchutil.Case]:
        ...

where ``scale`` is ``"tiny"`` (CI: CPU, seconds), ``"quick"`` or ``"full"``. Each
``benchutil.Case`` names op, pass, shape and dtype, gives ``build()`` (allocates fresh
random inputs, returns ``{"ours": fn, "<baseline>": fn, ...}``), the ideal ``bytes``
moved per call (memory-bound ops: GB/s, copy ceiling, L2 flush) or ``flops``, and
``targets`` (baseline name -> ratio the op's issue asks for; ``benchutil.COPY`` for a
fraction of the copy bandwidth). A case with ``device="cpu"`` runs on the CPU whatever
the suite's device (a CPU target reported by a GPU run). What cannot run on this machine
(say its baseline's package is absent) is returned as ``benchutil.Skipped(op, what,
reason)``: listed among the warnings, not an error. The suite imports every
``experiments/bench_*.py`` that defines ``suite_cases``; nothing else changes.

The script's own command line is a view of those cases, not a second copy: its
``main`` parses ``view_parser``'s flags (``--device``, ``--quick``/``--tiny``, ``--json``,
``--threads``, ``--cpu-time``, ``--no-compile``) and its own, and calls ``run_view``, which
runs its cases through the suite and prints them as one table.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pkgutil
import shlex
import sys
import time
import traceback
from pathlib import Path

import torch
from tqdm import tqdm

from experiments import benchutil
from experiments.benchutil import COPY, Case, Skipped

HERE = Path(__file__).resolve().parent
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


def suite_modules() -> list[str]:
    """Every experiments/bench_*.py module (this one aside), in name order."""
    return sorted(f"experiments.{m.name}" for m in pkgutil.iter_modules([str(HERE)])
                  if m.name.startswith("bench_"))


def collect_cases(device: str, scale: str, ops: list[str] | None,
                  errors: list[str], skipped: list[Skipped] | None = None) -> list[Case]:
    """The cases of every registered op (of ``ops`` when given); what an op cannot run
    here (``benchutil.Skipped``, with its reason) goes into ``skipped``."""
    cases = []
    for name in suite_modules():
        try:
            module = importlib.import_module(name)
        except (Exception, SystemExit) as e:  # one broken script must not hide every other op
            errors.append(f"import {name}: {type(e).__name__}: {e}")
            continue
        if not hasattr(module, "suite_cases"):
            continue
        try:
            found = module.suite_cases(device, scale)
        except Exception as e:
            errors.append(f"{name}.suite_cases: {type(e).__name__}: {e}")
            continue
        cases += select(found, ops, skipped, family=name.removeprefix("experiments.bench_"))
    return cases


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


def collect_overhead(device: str, ops: list[str] | None, errors: list[str],
                     skipped: list[Skipped]) -> list:
    try:
        from experiments import bench_overhead

        found = bench_overhead.overhead_cases(device)
    except Exception as e:
        errors.append(f"experiments.bench_overhead: {type(e).__name__}: {e}")
        return []
    return select(found, ops, skipped)


def run_suite(device: str | None = None, scale: str = "full", ops: list[str] | None = None,
              out_dir: str | Path | None = None, progress: bool = True,
              command: str | None = None, sections=SECTIONS, cpu_time: bool = False,
              cases: list[Case | Skipped] | None = None, clock=time.perf_counter) -> dict:
    """Run every registered case of ``sections``; returns the JSON document (and writes
    the files into ``out_dir`` when given). ``cpu_time``: the overhead section's CPU rows
    are timed by thread CPU time instead of the wall clock. ``cases``: these (one
    script's: a view) instead of every registered op's; ``clock``: the cases' CPU timer
    (``benchutil.measure``)."""

    assert scale in SCALES, scale
    assert set(sections) <= set(SECTIONS), sections
    # A session's steady state: the loader's shared pieces built before the ops load. On a
    # fresh cache they would otherwise build in the background while this process times
    # the ops, whose register_autograd_op declarations then take the Python path for the
    # whole run (README, JIT_LOADER_SHARED_NOW).
    os.environ.setdefault("JIT_LOADER_SHARED_NOW", "1")
    device = device or benchutil.default_device()
    started = time.perf_counter()
    env = benchutil.environment(device)
    warnings, errors = [], []
    message = benchutil.load_warning()
    if message:
        warnings.append(message)
    skipped = []
    if "cases" not in sections:
        cases = []
    elif cases is not None:
        cases = select(cases, ops, skipped)
    else:
        cases = collect_cases(device, scale, ops, errors, skipped)
    overhead = collect_overhead(device, ops, errors, skipped) if "overhead" in sections else []
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
    doc = {"environment": env, "scale": scale, "sections": list(sections),
           "ops": sorted({c.op for c in cases + overhead}),
           "families": {c.op: c.family for c in cases},
           "cases": len(cases), "elapsed_s": time.perf_counter() - started,
           "copy_ceiling": ceiling, "warnings": warnings, "errors": errors, "records": records,
           "overhead": rows, "overhead_cpu_clock": "thread CPU" if cpu_time else "wall-clock",
           "autograd_op_path": autograd_op_path() if overhead else None,
           "command": command}
    if out_dir is not None:
        write_outputs(doc, out_dir)
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


# ---------------------------------------------------------------------------- outputs


OUTPUTS = {"json": "bench.json", "ratios": "ratios.png", "bandwidth": "bandwidth.png",
           "summary": "summary.md"}


def write_outputs(doc: dict, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f for name, f in output_names(doc).items()}
    paths["json"].write_text(json.dumps(doc, indent=1) + "\n")
    if "ratios" in paths:
        plot_ratios(doc, paths["ratios"])
        plot_bandwidth(doc, paths["bandwidth"])
    paths["summary"].write_text(render_summary(doc))
    return paths


def output_names(doc: dict) -> dict[str, str]:
    """The files a run writes: the plots only where the cases section ran."""
    if doc.get("copy_ceiling") is None:
        return {k: v for k, v in OUTPUTS.items() if k in ("json", "summary")}
    return dict(OUTPUTS)


def _case_label(r: dict, several_impls: bool, several_ops: bool = False) -> str:
    label = f"{r['pass']} {r['shape']} {r['dtype']}"
    label = f"{r['op']} {label}" if several_ops else label
    return f"{label} [{r['impl']}]" if several_impls else label


def _title(doc: dict) -> str:
    env = doc["environment"]
    return f"{env['device']}, torch {env['torch']}, {env['date']}"


def _families(records: list[dict], doc: dict) -> dict[str, list[dict]]:
    """The records by plot family (the script that defines the op's cases), in run order."""
    family_of = doc.get("families") or {}
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(family_of.get(r["op"], r["op"]), []).append(r)
    return groups


def _small_multiples(groups: dict, rows_of, title: str, xlabel: str, width_per_panel=7.5):
    """A figure of one panel per family, two per row, each as tall as its rows need
    (``rows_of(records)``: the panel's row count). Returns the figure and its axes."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = list(groups) or ["(no records)"]
    cols = min(2, len(names))
    grid = [names[i:i + cols] for i in range(0, len(names), cols)]
    heights = [max(1.6, 0.16 * max(rows_of(groups.get(n, [])) for n in line) + 1.0)
               for line in grid]
    fig, axes = plt.subplots(len(grid), cols, figsize=(width_per_panel * cols, sum(heights) + 0.8),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    panels = {}
    for line, row_axes in zip(grid, axes):
        for k, ax in enumerate(row_axes):
            if k < len(line):
                panels[line[k]] = ax
                ax.set_title(line[k], loc="left", fontsize=10, fontweight="bold")
                ax.set_xlabel(xlabel, fontsize=7)
            else:
                ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return fig, panels


def plot_ratios(doc: dict, path: Path) -> None:
    """One panel per op family: per case (pass, size, dtype), the ratio to each baseline as
    a marker on a log axis, 1 marked, targets drawn as ticks (green met, red missed)."""
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    records = doc["records"]
    groups = _families(records, doc)

    def labels_of(mine):
        several = len({r["impl"] for r in mine}) > 1
        ops = len({r["op"] for r in mine}) > 1
        return list(dict.fromkeys(_case_label(r, several, ops) for r in mine))

    fig, panels = _small_multiples(
        groups, lambda mine: len(labels_of(mine)), f"Ratio to each baseline: {_title(doc)}",
        "baseline time / our time (log; > 1: ours faster); ticks: targets")
    values = [r["ratio"] for r in records] + [r["target"] for r in records if r["target"]]
    lo, hi = min(values + [1.0]) / 1.6, max(values + [1.0]) * 1.6
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>ph*"
    for family, ax in panels.items():
        mine = groups.get(family, [])
        labels = labels_of(mine)
        several = len({r["impl"] for r in mine}) > 1
        ops = len({r["op"] for r in mine}) > 1
        for k, baseline in enumerate(dict.fromkeys(r["baseline"] for r in mine)):
            sel = [r for r in mine if r["baseline"] == baseline]
            ys = [labels.index(_case_label(r, several, ops)) for r in sel]
            ax.scatter([r["ratio"] for r in sel], ys, s=14, color=colors[k % len(colors)],
                       marker=markers[k % len(markers)], label=baseline, zorder=3)
            for y, r in zip(ys, sel):
                if r["target"] is not None:
                    ax.plot([r["target"]] * 2, [y - 0.4, y + 0.4],
                            color="green" if r["met"] else "red", linewidth=2.5)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.tick_params(axis="x", labelsize=7)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.grid(axis="x", which="both", alpha=0.25)
        if mine:
            ax.legend(fontsize=6, loc="best", title="baseline", title_fontsize=6)
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # room for the title above the first row
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bandwidth(doc: dict, path: Path) -> None:
    """One panel per op family with memory-bound cases: achieved GB/s next to clone() at the
    same traffic, and the copy ceiling (all from the same run)."""
    import matplotlib.pyplot as plt

    seen, rows = set(), []
    for r in doc["records"]:
        key = (r["op"], r["pass"], r["shape"], r["dtype"], r["impl"])
        if r["gbps"] is not None and key not in seen:
            seen.add(key)
            rows.append(r)
    groups = _families(rows, doc)
    fig, panels = _small_multiples(
        groups, len, f"Achieved bandwidth: {_title(doc)}",
        "GB/s of ideal traffic (labels: % of clone() of the same bytes)")
    ceiling = doc["copy_ceiling"]
    for family, ax in panels.items():
        mine = groups.get(family, [])
        if not mine:
            ax.text(0.5, 0.5, "no memory-bound case in this run", ha="center",
                    transform=ax.transAxes)
        several = len({r["impl"] for r in mine}) > 1
        ops = len({r["op"] for r in mine}) > 1
        ys = range(len(mine))
        ax.barh([y - 0.2 for y in ys], [r["gbps"] for r in mine], 0.4, label="ours")
        ax.barh([y + 0.2 for y in ys], [r["copy_gbps"] for r in mine], 0.4,
                label="clone() of the same bytes", color="0.7")
        for y, r in zip(ys, mine):
            ax.text(r["gbps"], y - 0.2, f" {100 * r['gbps'] / r['copy_gbps']:.0f}%",
                    va="center", fontsize=5)
        ax.set_yticks(list(ys), [_case_label(r, several, ops) for r in mine], fontsize=6)
        ax.set_ylim(len(mine) - 0.5, -0.5)
        ax.axvline(ceiling["gbps"], color="black", linestyle="--", linewidth=1,
                   label=f"copy ceiling {ceiling['gbps']:.3g} GB/s")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.25)
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(v, digits=3) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:.0f}"
    return str(v)


def _spread_of(warning: str) -> float:
    try:
        return float(warning.split(" is ")[1].split("%")[0])
    except (IndexError, ValueError):
        return 0.0


def _warnings(all_warnings: list[str]) -> list[str]:
    """The warnings to show: many wide spreads are folded into their count and the widest
    five (indented)."""
    spreads = [w for w in all_warnings if w.startswith("wide spread")]
    warnings = [w for w in all_warnings if w not in spreads]
    if len(spreads) > 8:  # many noisy timings: say how many, show the worst
        worst = sorted(spreads, key=_spread_of, reverse=True)[:5]
        warnings.append(f"wide spread (IQR over {100 * benchutil.WIDE_SPREAD:.0f}% of the median) "
                        f"in {len(spreads)} timings, all listed in bench.json; the widest:")
        warnings += [f"  {w.removeprefix('wide spread: ')}" for w in worst]
    else:
        warnings += spreads
    return warnings


def render_summary(doc: dict, results: bool = False, command: str | None = None) -> str:
    """Markdown: header, warnings, the targets, then every record.

    ``results``: as a section for experiments/RESULTS.md (``##`` heading naming the device,
    torch version and date, the command that produced it)."""
    env = doc["environment"]
    ceiling = doc["copy_ceiling"]
    overhead = doc.get("overhead", [])
    h = "##" if results else "#"
    lines = [f"{h} Benchmark suite: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), "
             f"{env['date']}", ""]
    if results:
        lines += [f"`{command or 'python -m experiments.bench'}` ({doc['scale']} sizes): "
                  f"{doc['cases']} cases and {len(overhead)} call-overhead rows of "
                  f"{', '.join(doc['ops'])} in {doc['elapsed_s']:.0f} s. "
                  "Ratios are baseline time / our time, baselines timed in the same run, "
                  "interleaved; times are medians (CUDA events on a GPU) with the IQR; wall "
                  "times (host-bound cases) are synchronised calls timed by the host clock.", ""]
    else:
        lines += [f"{doc['cases']} cases and {len(overhead)} call-overhead rows "
                  f"({doc['scale']} sizes), {doc['elapsed_s']:.0f} s, "
                  f"load average {env['load_average']} on {env['cores']} cores.", ""]
    if ceiling is not None:
        lines += [f"Copy ceiling: {ceiling['gbps']:.0f} GB/s (clone() of "
                  f"{ceiling['bytes'] >> 20} MB of traffic, same run).", ""]
    warnings = _warnings(doc["warnings"])
    for title, items in (("Warnings", warnings), ("Errors", doc["errors"])):
        if items:
            lines += [f"{h}# {title}", ""]
            lines += [f"  - {w.strip()}" if w.startswith("  ") else f"- {w}" for w in items] + [""]
    if overhead:
        lines += render_overhead(overhead, h, doc.get("overhead_cpu_clock", "wall-clock"),
                                 doc.get("autograd_op_path"))
    if ceiling is None:  # the cases section did not run
        return "\n".join(lines) + "\n"
    targets = [r for r in doc["records"] if r["target"] is not None]
    met = sum(r["met"] for r in targets)
    lines += [f"{h}# Targets: {met} of {len(targets)} met", ""]
    if targets:
        lines.append("| op | pass | shape | dtype | baseline | ours us | baseline us | ratio | "
                     "target | met | reason | wall ratio |")
        lines.append("|" + "---|" * 12)
        for r in targets:
            wall = f"{r['wall_ratio']:.3g}x" if r["wall_ratio"] else ""
            lines.append(
                f"| {r['op']} | {r['pass']} | {r['shape']} | {r['dtype']} | {r['baseline']} | "
                f"{_fmt(r['median_us'])} | {_fmt(r['baseline_us'])} | {r['ratio']:.3g}x | "
                f"{r['target']:g}x | {'met' if r['met'] else '**NOT MET**'} | {r['reason'] or ''} | "
                f"{wall} |")
    else:
        lines.append("(no case of this run carries a target)")
    lines += ["", f"{h}# All results", ""]
    lines.append("| op | pass | shape | dtype | impl | us (IQR) | GB/s | % copy | "
                 "baseline | baseline us | ratio | wall us | baseline wall us | wall ratio |")
    lines.append("|" + "---|" * 14)
    for r in doc["records"]:
        pct = 100 * r["gbps"] / r["copy_gbps"] if r["gbps"] and r["copy_gbps"] else None
        lines.append(
            f"| {r['op']} | {r['pass']} | {r['shape']} | {r['dtype']} | {r['impl']} | "
            f"{_fmt(r['median_us'])} ({_fmt(r['iqr_us'], 2)}) | {_fmt(r['gbps'])} | {_fmt(pct)} | "
            f"{r['baseline']} | {_fmt(r['baseline_us'])} | {r['ratio']:.3g}x | {_fmt(r['wall_us'])} | "
            f"{_fmt(r['baseline_wall_us'])} | {_fmt(r['wall_ratio'])}{'x' if r['wall_ratio'] else ''} |")
    return "\n".join(lines) + "\n"


def render_overhead(rows: list[dict], h: str = "#", cpu_clock: str = "wall-clock",
                    autograd_path: str | None = None) -> list[str]:
    """The call-overhead table: host time per call, ours / native (< 1: ours cheaper)."""
    limited = [r for r in rows if r["limit"] is not None]
    within = sum(r["within"] for r in limited)
    served = (f" The autograd of sigmoid, GELU, resize and ROIAlign: {autograd_path}."
              if autograd_path else "")
    lines = [f"{h}# Call overhead: {within} of {len(limited)} within the limits", "",
             "Host time per call on one CPU thread, best of "
             f"{rows[0]['runs']} runs of back-to-back calls (one sync at the end of a run on "
             f"CUDA; CPU rows by {cpu_clock} time); ratio is ours / native (< 1: ours cheaper); "
             "limits: forward 1.25x, forward+backward 1.5x. CUDA graph rows: replay time per "
             "op, the floor. Rows aten via torch.ops: the native op entered as every custom op is, "
             "the floor of a Python call. Rows cell: the LLTM cell at the tutorial's size against "
             "the eager cell, limits 0.2x forward and 0.333x forward+backward (5x and 3x eager)."
             f"{served}", "",
             "| op | pass | mode | device | shape | ours | native | calls | ours us | "
             "native us | ratio | limit | within |",
             "|" + "---|" * 13]
    for r in rows:
        verdict = "" if r["within"] is None else "yes" if r["within"] else "**NO**"
        limit = "" if r["limit"] is None else f"{r['limit']:.3g}x"
        lines.append(
            f"| {r['op']} | {r['pass']} | {r['mode']} | {r['device']} | {r['shape']} | "
            f"`{r['ours']}` | `{r['native']}` | {r['calls']} | {_fmt(r['ours_us'])} | "
            f"{_fmt(r['native_us'])} | {r['ratio']:.3g}x | {limit} | {verdict} |")
    return lines + [""]


# ------------------------------------------------------------------------ per-op views

# The table a per-op script prints: one row per record.
VIEW_COLUMNS = {"pass": "pass", "shape": "shape", "dtype": "dtype", "impl": "impl",
                "median_us": "us", "iqr_us": "IQR us", "gbps": "GB/s", "baseline": "baseline",
                "baseline_us": "baseline us", "ratio": "ratio", "wall_ratio": "wall ratio",
                "target": "target", "met": "met"}


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
    doc = run_suite(device, scale, ops, progress=not args.no_progress, command=command,
                    sections=("cases",), cases=found, clock=clock)
    print(render_view(doc, name))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if doc["errors"] else 0


def render_view(doc: dict, name: str) -> str:
    """The header, the copy ceiling, warnings and errors, and every record in one table."""
    env = doc["environment"]
    lines = [f"# bench_{name}: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), "
             f"{env['date']}, {env['threads']} threads, {doc['scale']} sizes, "
             f"load average {env['load_average']}",
             f"# copy ceiling {doc['copy_ceiling']['gbps']:.3g} GB/s; ratio: baseline time / "
             "our time (> 1: ours faster); GB/s: ideal traffic of the case"]
    lines += [f"# warning: {w.strip()}" for w in _warnings(doc["warnings"])]
    lines += [f"# ERROR: {e}" for e in doc["errors"]]
    rows = []
    for r in doc["records"]:
        row = {"op": r["op"]} if len(doc["ops"]) > 1 else {}
        row.update({title: r[key] for key, title in VIEW_COLUMNS.items()})
        rows.append(row)
    return "\n".join(lines + [benchutil.format_table(rows)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (CI on a CPU: seconds)")
    parser.add_argument("--ops", help="comma-separated op names (default: every registered op)")
    parser.add_argument("--only", choices=SECTIONS,
                        help="one section: cases (ops against baselines) or overhead (call "
                             "overhead on tiny inputs)")
    parser.add_argument("--out", default="experiments/out/bench",
                        help="output folder (default experiments/out/bench)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when visible)")
    parser.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the overhead section's CPU rows by thread CPU time (a loaded "
                             "machine)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--render", metavar="JSON", help="only re-render the summary of a bench.json")
    parser.add_argument("--results", action="store_true",
                        help="print the summary as a section for experiments/RESULTS.md")
    args = parser.parse_args(argv)
    command = "python -m experiments.bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    if args.render:
        doc = json.loads(Path(args.render).read_text())
        print(render_summary(doc, results=args.results, command=doc.get("command")))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = "tiny" if args.tiny else "quick" if args.quick else "full"
    ops = args.ops.split(",") if args.ops else None
    doc = run_suite(args.device, scale, ops, out_dir=args.out, progress=not args.no_progress,
                    command=command.strip(), sections=(args.only,) if args.only else SECTIONS,
                    cpu_time=args.cpu_time)
    paths = {name: Path(args.out) / f for name, f in output_names(doc).items()}
    print(render_summary(doc, results=args.results, command=doc["command"]))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
