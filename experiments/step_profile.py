"""Where a training step's time goes: torch.profiler around a few steps of one rank, and a
compact summary of its trace.

experiments/train_lltm.py marks each step (``train_step``) and its phases (``data``,
``forward``, ``backward``, ``optimizer``; ``replay`` for a captured step) with
``record_function`` while the profiler runs. The summary reads the exported Chrome trace:

* GPU work (kernels, copies, memsets) is attributed to the step and phase whose host span
  contains its launch (the runtime call with the same correlation id), so the backward's
  kernels are the backward's even though the autograd engine launches them from its own
  thread while the main thread waits in ``backward()``;
* per step: the GPU's busy time (the union of all its activity), idle time inside the step
  and between steps, time per kernel family (the op's kernels, GEMMs, NCCL, the rest);
* the all-reduce: NCCL kernel time, how much of it ran while compute kernels ran
  (overlapped), how much ran alone (exposed), and how long after the backward's last kernel
  the last NCCL kernel ended (the tail the optimizer step waits for);
* host waits: time in the runtime's synchronising calls and copies, and the ``.item()``
  calls that copied from the GPU.

    python -m experiments.step_profile DIR/summary_*.json      # the one-line-per-rank table
"""

from __future__ import annotations

import bisect
import gzip
import json
import shutil
import statistics
import sys
from pathlib import Path

PHASES = ("data", "forward", "backward", "optimizer", "replay")
STEP = "train_step"
# Runtime calls that make the host wait for the GPU (a copy to or from pageable memory
# waits for the stream as well; those appear under "memcpy").
WAIT_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaStreamQuery", "cudaEventQuery")
ITEM_OPS = ("aten::_local_scalar_dense",)  # what .item(), float(t), bool(t) call


def start(device):
    """A started profiler recording CPU activity, and CUDA activity on a GPU."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    profiler.start()
    return profiler


def finish(profiler, out_dir: Path, name: str, steps: int) -> dict:
    """Stop ``profiler``; write ``trace_NAME.json.gz`` and ``summary_NAME.json`` to
    ``out_dir``; return the summary."""
    profiler.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    plain = out_dir / f"trace_{name}.json"
    profiler.export_chrome_trace(str(plain))
    summary = summarize(json.loads(plain.read_text()))
    summary.update(name=name, steps_recorded=steps)
    with open(plain, "rb") as src, gzip.open(out_dir / f"trace_{name}.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    (out_dir / f"summary_{name}.json").write_text(json.dumps(summary, indent=1))
    return summary


# --------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------


def union(intervals) -> list[tuple[float, float]]:
    """Sorted, disjoint cover of ``intervals`` (pairs of start, end)."""
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def length(intervals) -> float:
    return sum(e - s for s, e in intervals)


def intersect(a, b) -> list[tuple[float, float]]:
    """Intersection of two sorted, disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


# --------------------------------------------------------------------------------------
# Trace
# --------------------------------------------------------------------------------------


def _kind(event: dict) -> str | None:
    cat = str(event.get("cat", "")).lower()
    if cat in ("kernel",):
        return "kernel"
    if cat in ("gpu_memcpy", "memcpy"):
        return "memcpy"
    if cat in ("gpu_memset", "memset"):
        return "memset"
    if cat in ("cuda_runtime", "runtime", "cuda_driver"):
        return "runtime"
    if cat in ("cpu_op", "operator"):
        return "cpu_op"
    if cat == "user_annotation":
        return "annotation"
    return None


def family(name: str, kind: str) -> str:
    """The kernel family of a GPU event: lltm, gemm, nccl, other kernels, memcpy, memset."""
    if kind != "kernel":
        return kind
    low = name.lower()
    if "nccl" in low:
        return "nccl"
    if "lltm" in low:
        return "lltm"
    if any(k in low for k in ("gemm", "xmma", "cutlass", "cublas")):
        return "gemm"
    return "other"


def _span(e: dict) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))


def summarize(trace: dict) -> dict:
    """The per-step averages described in the module's doc, from a Chrome trace (dict)."""
    by_kind: dict[str, list[dict]] = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and "ts" in e:
            kind = _kind(e)
            if kind is not None:
                by_kind.setdefault(kind, []).append(e)
    annotations = by_kind.get("annotation", [])
    steps = sorted((_span(e) for e in annotations if e["name"] == STEP))
    if not steps:
        return {"steps": 0}
    starts = [s for s, _ in steps]

    def step_of(t: float) -> int | None:
        i = bisect.bisect_right(starts, t) - 1
        return i if i >= 0 and t <= steps[i][1] else None

    phases = sorted((*_span(e), e["name"]) for e in annotations if e["name"] in PHASES)

    def phase_of(t: float) -> str | None:
        inner = None  # phases do not nest; the last one starting before t that covers it
        for s, e, name in phases:
            if s > t:
                break
            if t <= e:
                inner = name
        return inner

    launches = {}
    for e in by_kind.get("runtime", []):
        corr = e.get("args", {}).get("correlation")
        if corr is not None:
            launches[corr] = e
    n = len(steps)
    per_step = [{"events": [], "phase_cpu": {}} for _ in range(n)]
    for s, e, name in phases:
        i = step_of(s)
        if i is not None:
            per_step[i]["phase_cpu"][name] = per_step[i]["phase_cpu"].get(name, 0.0) + (e - s)
    unattributed = 0
    for kind in ("kernel", "memcpy", "memset"):
        for e in by_kind.get(kind, []):
            launch = launches.get(e.get("args", {}).get("correlation"))
            t = float(launch["ts"]) if launch is not None else None
            i = step_of(t) if t is not None else None
            if i is None:
                unattributed += 1
                continue
            s, end = _span(e)
            per_step[i]["events"].append({
                "start": s, "end": end, "name": e["name"], "family": family(e["name"], kind),
                "phase": phase_of(t), "launch_us": float(launch.get("dur", 0.0))})

    def mean(values) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.fmean(values) if values else None

    ms = 1e-3
    rows = []
    for i, st in enumerate(per_step):
        ev = st["events"]
        row = {"cpu_ms": (steps[i][1] - steps[i][0]) * ms,
               "phase_cpu_ms": {k: v * ms for k, v in st["phase_cpu"].items()}}
        if ev:
            everything = union((x["start"], x["end"]) for x in ev)
            compute = union((x["start"], x["end"]) for x in ev if x["family"] != "nccl")
            nccl = union((x["start"], x["end"]) for x in ev if x["family"] == "nccl")
            window = (everything[0][0], everything[-1][1])
            bwd_end = max((x["end"] for x in ev if x["phase"] == "backward"
                           and x["family"] != "nccl"), default=None)
            row.update(
                gpu_start=window[0], gpu_end=window[1],
                gpu_busy_ms=length(everything) * ms,
                gpu_idle_in_step_ms=(window[1] - window[0] - length(everything)) * ms,
                family_ms={f: sum(x["end"] - x["start"] for x in ev if x["family"] == f) * ms
                           for f in {x["family"] for x in ev}},
                phase_gpu_ms={p: sum(x["end"] - x["start"] for x in ev if x["phase"] == p
                                     and x["family"] != "nccl") * ms
                              for p in {x["phase"] for x in ev}},
                nccl_ms=length(nccl) * ms, nccl_calls=sum(x["family"] == "nccl" for x in ev),
                nccl_overlapped_ms=length(intersect(nccl, compute)) * ms,
                nccl_exposed_ms=(length(nccl) - length(intersect(nccl, compute))) * ms,
                nccl_tail_after_backward_ms=(max(0.0, nccl[-1][1] - bwd_end) * ms
                                             if nccl and bwd_end is not None else None))
        rows.append(row)
    gpu_rows = [r for r in rows if "gpu_start" in r]
    between = [(b["gpu_start"] - a["gpu_end"]) * ms for a, b in zip(gpu_rows, gpu_rows[1:])]
    periods = [(b["gpu_start"] - a["gpu_start"]) * ms for a, b in zip(gpu_rows, gpu_rows[1:])]

    def mean_dict(key: str) -> dict:
        keys = sorted({k for r in rows for k in r.get(key, {})}, key=str)
        return {str(k): sum(r.get(key, {}).get(k, 0.0) for r in rows) / n for k in keys}

    kernels: dict[str, list[float]] = {}
    for st in per_step:
        for x in st["events"]:
            kernels.setdefault(x["name"], []).append(x["end"] - x["start"])
    top = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:12]
    waits = {}
    for e in by_kind.get("runtime", []):
        name = e["name"]
        if name in WAIT_CALLS or name.startswith("cudaMemcpy") or name.startswith("cuMemcpy"):
            if step_of(float(e["ts"])) is not None:
                w = waits.setdefault(name, {"calls": 0, "ms": 0.0})
                w["calls"] += 1
                w["ms"] += float(e.get("dur", 0.0)) * ms
    copies = {}
    for st in per_step:
        for x in st["events"]:
            if x["family"] == "memcpy":
                c = copies.setdefault(x["name"], {"calls": 0, "gpu_ms": 0.0, "host_call_ms": 0.0})
                c["calls"] += 1
                c["gpu_ms"] += (x["end"] - x["start"]) * ms
                c["host_call_ms"] += x["launch_us"] * ms
    # A .item() of a CUDA tensor copies to the host and waits: a copy or wait call inside
    # its span, on its thread. (The optimizer's .item() of CPU step counts waits for nothing.)
    host_calls = sorted((float(e["ts"]), e.get("pid"), e.get("tid"))
                        for e in by_kind.get("runtime", [])
                        if e["name"] in WAIT_CALLS or "emcpy" in e["name"])
    call_times = [t for t, _, _ in host_calls]
    items = 0
    for e in by_kind.get("cpu_op", []):
        if e["name"] in ITEM_OPS and step_of(float(e["ts"])) is not None:
            s0, s1 = _span(e)
            lo, hi = bisect.bisect_left(call_times, s0), bisect.bisect_right(call_times, s1)
            items += any(host_calls[k][1:] == (e.get("pid"), e.get("tid")) for k in range(lo, hi))
    per = lambda d: {k: {kk: vv / n for kk, vv in v.items()} for k, v in d.items()}  # noqa: E731
    return {
        "steps": n,
        "step_cpu_ms": mean(r["cpu_ms"] for r in rows),
        "gpu_period_ms": mean(periods),
        "gpu_busy_ms": mean(r.get("gpu_busy_ms") for r in rows),
        "gpu_idle_in_step_ms": mean(r.get("gpu_idle_in_step_ms") for r in rows),
        "gpu_idle_between_steps_ms": mean(between),
        "phase_cpu_ms": mean_dict("phase_cpu_ms"),
        "phase_gpu_ms": mean_dict("phase_gpu_ms"),
        "family_ms": mean_dict("family_ms"),
        "nccl_ms": mean(r.get("nccl_ms") for r in rows),
        "nccl_calls": mean(r.get("nccl_calls") for r in rows),
        "nccl_overlapped_ms": mean(r.get("nccl_overlapped_ms") for r in rows),
        "nccl_exposed_ms": mean(r.get("nccl_exposed_ms") for r in rows),
        "nccl_tail_after_backward_ms": mean(r.get("nccl_tail_after_backward_ms") for r in rows),
        "host_waits": per(waits),
        "copies": per(copies),
        "device_item_calls": items / n,
        "unattributed_gpu_events": unattributed,
        # Each rank should drive its own GPU only; another index here is a context and
        # work on a GPU of another rank.
        "gpu_devices": sorted({e.get("args", {}).get("device") for k in ("kernel", "memcpy", "memset")
                               for e in by_kind.get(k, []) if e.get("args", {}).get("device") is not None}),
        "top_kernels": [{"name": k[:90], "calls": len(v) / n, "ms": sum(v) / n * ms}
                        for k, v in top],
    }


# --------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------

TABLE_COLUMNS = ["run", "gpus", "step_cpu_ms", "gpu_period_ms", "gpu_busy_ms", "idle_in_step",
                 "idle_between", "fwd_cpu", "bwd_cpu", "opt_cpu", "fwd_gpu", "bwd_gpu",
                 "opt_gpu", "lltm", "gemm", "other", "nccl", "nccl_overlap", "nccl_exposed",
                 "nccl_tail", "host_waits", "device_items"]


def table_row(s: dict) -> dict:
    """One row of the table: milliseconds per step (CPU: host span of a phase; GPU: kernel
    time launched in it)."""
    def r(v):
        return "-" if v is None else round(v, 3)

    pc, pg, fam = s.get("phase_cpu_ms", {}), s.get("phase_gpu_ms", {}), s.get("family_ms", {})
    waits = "; ".join(f"{k} {v['calls']:g}x {v['ms']:.3f}" for k, v in s.get("host_waits", {}).items())
    return {"run": s.get("name", "?"), "gpus": ",".join(map(str, s.get("gpu_devices", []))) or "-",
            "step_cpu_ms": r(s.get("step_cpu_ms")),
            "gpu_period_ms": r(s.get("gpu_period_ms")), "gpu_busy_ms": r(s.get("gpu_busy_ms")),
            "idle_in_step": r(s.get("gpu_idle_in_step_ms")),
            "idle_between": r(s.get("gpu_idle_between_steps_ms")),
            "fwd_cpu": r(pc.get("forward")), "bwd_cpu": r(pc.get("backward")),
            "opt_cpu": r(pc.get("optimizer", pc.get("replay"))),
            "fwd_gpu": r(pg.get("forward")), "bwd_gpu": r(pg.get("backward")),
            "opt_gpu": r(pg.get("optimizer", pg.get("replay"))),
            "lltm": r(fam.get("lltm")), "gemm": r(fam.get("gemm")), "other": r(fam.get("other")),
            "nccl": r(s.get("nccl_ms")), "nccl_overlap": r(s.get("nccl_overlapped_ms")),
            "nccl_exposed": r(s.get("nccl_exposed_ms")),
            "nccl_tail": r(s.get("nccl_tail_after_backward_ms")),
            "host_waits": waits or "-", "device_items": r(s.get("device_item_calls"))}


def format_summaries(summaries) -> str:
    from experiments import benchutil
    return benchutil.format_table([table_row(s) for s in summaries], TABLE_COLUMNS)


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:])
    print(format_summaries([json.loads(Path(p).read_text()) for p in paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
