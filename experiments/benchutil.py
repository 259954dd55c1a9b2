"""The benchmark suite's records: ``Case`` (one case of the suite: our implementations
against baselines), ``Skipped``, the JSON record fields and their validation, and
``save_json`` with the header every result file carries (``run_header``: device, torch,
date, commit, command). The timing protocol itself (``measure``, ``host_time``, ``time_fn``,
``kernel_times``, the L2 flush, the warnings, ``environment``, ``format_table``) lives in
the installed package, jit_tools/tools/timing.py, and is imported here under the same
names, so every script reads ``benchutil.measure``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

from jit_tools.tools.timing import (MIN_IQR_S, SPIN_CYCLES, WIDE_SPREAD, HostTiming, Timing,  # noqa: F401
                                    default_device, device_name, environment, flush_l2,
                                    format_table, gbps, host_time, kernel_times, l2_flush_bytes,
                                    load_warning, measure, spread_warning, sync, time_fn)

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------- suite cases


@dataclasses.dataclass
class Case:
    """One benchmark case of the suite: our implementation(s) against baselines.

    ``build()`` allocates the inputs (fresh random data) and returns the callables,
    ``{name: fn}``; the names in ``ours`` are our implementations, every other name a
    baseline. ``bytes``: ideal traffic of one call (read + written; gives GB/s and the
    copy-ceiling baseline, and makes the case memory-bound: L2 flush between calls).
    ``flops``: floating-point operations of one call (gives FLOP/s). ``targets``:
    baseline name -> the ratio our first implementation must reach (ratio = baseline
    time / our time; for ``COPY`` it is our GB/s over the copy's at the same traffic).
    ``check(fns)``: raises if an implementation gives a wrong answer (run once, before
    timing). ``host_bound``: also time by wall clock. ``device``: where this case runs
    when it is not the suite's device (a CPU target reported by a GPU run); its records
    name that device. ``family``: the plot panel it is drawn in (the script that defines
    it, ``bench_<family>.py``; the suite fills it in).
    """

    op: str
    pass_: str
    shape: str
    dtype: str
    build: Callable[[], dict[str, Callable[[], object]]]
    ours: Sequence[str] = ("ours",)
    bytes: int | None = None
    flops: int | None = None
    targets: dict[str, float] = dataclasses.field(default_factory=dict)
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    check: Callable[[dict], None] | None = None
    host_bound: bool = False
    device: str | None = None
    family: str | None = None

    @property
    def label(self) -> str:
        return f"{self.op} {self.pass_} {self.shape} {self.dtype}"


@dataclasses.dataclass
class Skipped:
    """What an op's ``suite_cases`` cannot run on this machine, and why (e.g. its
    baseline's package is not installed); the suite lists it among the warnings."""

    op: str
    what: str
    reason: str

    @property
    def message(self) -> str:
        return f"skipped: {self.op} {self.what}: {self.reason}"


# Name of the baseline that is the device's copy speed for the case's own traffic.
COPY = "clone() of the same bytes"

# The JSON record of one (case, our implementation, baseline): field -> (type, meaning).
RECORD_FIELDS = {
    "op": (str, "op name"),
    "pass": (str, "forward, backward or forward+backward"),
    "shape": (str, "problem size, e.g. 2^26 or 16x32x128"),
    "dtype": (str, "element type"),
    "impl": (str, "our implementation timed"),
    "device": (str, "device name"),
    "torch": (str, "torch version"),
    "date": (str, "ISO date of the run"),
    "median_us": (float, "median time per call (CUDA events on GPU)"),
    "iqr_us": (float, "interquartile range of the per-call times"),
    "spread": (float, "IQR / median"),
    "reps": (int, "repetitions timed"),
    "wall_us": ((float, type(None)), "median synchronised wall time per call (host-bound cases)"),
    "baseline_wall_us": ((float, type(None)), "the baseline's wall time (host-bound cases)"),
    "gbps": ((float, type(None)), "achieved GB/s of the ideal traffic (memory-bound cases)"),
    "flops_per_s": ((float, type(None)), "achieved FLOP/s (compute cases)"),
    "copy_gbps": ((float, type(None)), "clone() GB/s at the same traffic, same run"),
    "baseline": (str, "baseline name"),
    "baseline_us": (float, "baseline median time per call"),
    "baseline_iqr_us": (float, "baseline IQR"),
    "ratio": (float, "baseline time / our time (> 1: ours faster)"),
    "wall_ratio": ((float, type(None)), "the same ratio of wall times (host-bound cases)"),
    "target": ((float, type(None)), "the ratio the op's issue asks for, if any"),
    "met": ((bool, type(None)), "ratio >= target (null without a target)"),
    "reason": ((str, type(None)), "why a target is out of reach, where known"),
}


# A row of the call-overhead section (``host_time``): field -> (type, meaning).
OVERHEAD_FIELDS = {
    "op": (str, "op name"),
    "pass": (str, "forward or forward+backward"),
    "mode": (str, "eager, cuda graph (replay time per op: the floor), aten via torch.ops (the "
                  "native op entered as a custom op is: the floor of a Python call), or cell (the "
                  "LLTM cell at the tutorial's size against the eager cell)"),
    "shape": (str, "input size"),
    "dtype": (str, "element type"),
    "device": (str, "device name"),
    "ours": (str, "our call timed (the op's Python function through its handle)"),
    "native": (str, "the native twin's call"),
    "calls": (int, "calls per run"),
    "runs": (int, "runs; the best one gives the time"),
    "ours_us": (float, "our host time per call, best run"),
    "native_us": (float, "the native twin's host time per call, best run"),
    "ours_median_us": (float, "our host time per call, median run"),
    "native_median_us": (float, "the native twin's, median run"),
    "ratio": (float, "ours_us / native_us (< 1: our call is cheaper)"),
    "limit": ((float, type(None)), "the largest ratio the overhead issue allows, if any"),
    "within": ((bool, type(None)), "ratio <= limit (null without a limit)"),
}


def _validate(row: dict, fields: dict) -> None:
    missing = set(fields) - set(row)
    extra = set(row) - set(fields)
    if missing or extra:
        raise ValueError(f"record fields: missing {sorted(missing)}, unexpected {sorted(extra)}")
    for key, (kind, _) in fields.items():
        value = row[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if isinstance(value, bool) and kind in (float, int, str):
            raise ValueError(f"{key}: {value!r} is not a {kind.__name__}")
        if not isinstance(value, kind):
            raise ValueError(f"{key}: {value!r} has type {type(value).__name__}")


def validate_overhead_row(row: dict) -> None:
    """Raise ValueError unless ``row`` has exactly the fields of ``OVERHEAD_FIELDS``."""
    _validate(row, OVERHEAD_FIELDS)
    if row["within"] is not None and row["within"] != (row["ratio"] <= row["limit"]):
        raise ValueError(f"within={row['within']} contradicts ratio {row['ratio']} "
                         f"and limit {row['limit']}")


def validate_record(record: dict) -> None:
    """Raise ValueError unless ``record`` has exactly the documented fields and types."""
    _validate(record, RECORD_FIELDS)
    if record["met"] is not None and record["met"] != (record["ratio"] >= record["target"]):
        raise ValueError(f"met={record['met']} contradicts ratio {record['ratio']} "
                         f"and target {record['target']}")


# ------------------------------------------------------------------------- reporting


def git_commit() -> str | None:
    """The commit the results come from: ``RESULTS_COMMIT`` where the run's machine has no
    git checkout, else ``git rev-parse --short HEAD``; None where neither says."""
    if os.environ.get("RESULTS_COMMIT"):
        return os.environ["RESULTS_COMMIT"]
    try:
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def command_line() -> str:
    """The running command as a user types it (``python -m experiments.bench --quick``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = (f"python -m {spec.name.removesuffix('.__main__')}" if spec is not None and spec.name
               else f"python {sys.argv[0]}")
    return " ".join([program, shlex.join(sys.argv[1:])]).strip()


def run_header(device=None) -> dict:
    """What every result file says of its run: device, torch, CUDA, date, threads, cores,
    load (``environment``), and the commit and the command (experiments/results.py shows
    them above the table)."""
    return {**environment(device), "commit": git_commit(), "command": command_line()}


def save_json(path: str, rows: Iterable[dict], benchmark: str | None = None,
              columns: Sequence[str] | None = None, **extra) -> None:
    """Write ``rows`` under the run's header to ``path`` (e.g. ``$OUT/results/NAME.json``),
    named ``benchmark`` (default: the running module's name), with the ``columns`` its table
    on the results page shows (default: every field of the first row)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = benchmark or (spec.name.rpartition(".")[2] if spec is not None and spec.name else "run")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    doc = {"benchmark": name, "environment": run_header(), **extra, "rows": list(rows)}
    if columns is not None:
        doc["columns"] = list(columns)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
