"""Timing and reporting shared by every benchmark (scripts and notebooks alike).

Rules (DESIGN.md, performance protocol): warm up first; time GPU work with CUDA
events around the region; report the median of many runs on fresh random data;
report ratios against baselines measured in the same run.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from typing import Callable, Iterable, Sequence

import torch


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn: Callable[[], object], device="cpu", *, warmup: int = 10, reps: int = 100,
            min_seconds: float = 0.0) -> float:
    """Median wall time of ``fn()`` in seconds.

    On CUDA each call is bracketed by CUDA events (device time of the enqueued work,
    launch gaps included); on CPU by ``time.perf_counter``. ``min_seconds`` keeps
    repeating until that much time was spent, for noisy CPU timings.
    """
    dev = torch.device(device)
    for _ in range(warmup):
        fn()
    sync(dev)
    samples: list[float] = []
    spent = 0.0
    if dev.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(dev)
        samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    else:
        while len(samples) < reps or spent < min_seconds:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            samples.append(dt)
            spent += dt
    return statistics.median(samples)


def copy_bandwidth(numel: int, dtype=torch.float32, device="cuda", reps: int = 50) -> float:
    """GB/s of ``clone()`` on a tensor of ``numel`` elements (bytes read + written)."""
    x = torch.randn(numel, device=device).to(dtype)
    seconds = time_fn(lambda: x.clone(), device, reps=reps)
    return 2 * x.numel() * x.element_size() / seconds / 1e9


def gbps(bytes_moved: int, seconds: float) -> float:
    return bytes_moved / seconds / 1e9


def environment() -> dict:
    """Device, torch version and date: the header every recorded result carries."""
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name()
    else:
        device = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return {
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.date.today().isoformat(),
        "threads": torch.get_num_threads(),
    }


def format_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """A plain-text table (also valid Markdown) of a list of dicts."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())

    def cell(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    table = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in table)) for i, c in enumerate(columns)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"
    out = [line(columns), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in table]
    return "\n".join(out)


def save_json(path: str, rows: Iterable[dict], **extra) -> None:
    """Write rows plus the environment header to ``path`` (e.g. under $OUT)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"environment": environment(), **extra, "rows": list(rows)}, f, indent=1)
