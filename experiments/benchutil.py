"""The one timing module: every benchmark script, the suite and notebook 04 time with it.

How a measurement is taken (and why):

* Warm-up calls first (caches, autotuning, ``torch.compile``'s first compilation).
* On CUDA each call is bracketed by CUDA events on the current stream: device time of
  the enqueued work, launch gaps included. On CPU, ``time.perf_counter`` around a call.
* Many repetitions; the result is the median with the interquartile range (IQR) as its
  spread, so one slow outlier moves neither.
* Memory-bound cases flush the L2 cache between repetitions (a memset of twice its
  size, outside the timed region): otherwise a tensor that fits in L2 is read from it
  and the GB/s exceed what DRAM can give. After the flush the GPU spins for about
  0.2 ms (``torch.cuda._sleep``) before the start event, so the host has enqueued the
  call before the GPU gets to it: the events then time the kernels alone, whatever the
  host overhead of the call (without it, a call of a few microseconds times the host
  of whichever implementation ran just before it).
* Implementations are interleaved (``measure``): repetition k calls every
  implementation once, in an order rotated by k, so a slow spell of the machine (other
  processes, clock changes) lands on all of them rather than on whichever ran then.
* Host-bound cases (launch and dispatch overhead dominate) are also timed by the wall
  clock, synchronising after each call: that is what a Python caller waits. (Without a
  flush, CUDA events include the launch gaps: a host-bound call times at its host pace.)
* ``warnings`` says when the figures deserve less trust: the machine is loaded (load
  average near or above its cores) or a spread is wide (IQR over 10% of the median and
  over a microsecond).

* Call overhead (``host_time``) is the one other measurement, and a different one: not
  the time of a call but the rate a Python loop of calls sustains, as the best of a few
  runs of many back-to-back calls, one sync at the end of each run on CUDA. A tiny op's
  call is host work (argument parsing, dispatch, autograd bookkeeping, the launch) while
  the GPU idles; the rate of the loop is the host time per call.

``measure`` is the timing protocol: the suite (``experiments/bench.py``), the per-op
scripts (views of the suite's cases) and every other script time with it; ``time_fn`` is
its median for one callable; ``kernel_times`` (the CUDA profiler) says which kernels a
call launches and where its device time goes. ``Case`` is one benchmark case of the suite.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import statistics
import time
from typing import Callable, Iterable, Sequence

import torch

# A spread (IQR / median) above this is reported as wide, unless the IQR is below
# MIN_IQR_S: CUDA events resolve about half a microsecond, so a few-microsecond kernel
# shows a 10% IQR from the clock alone.
WIDE_SPREAD = 0.10
MIN_IQR_S = 1e-6
# GPU clock cycles spun before a flushed call's start event: ~0.2 ms at 2 GHz, more than
# the host overhead of one call (torch.compile'd wrappers take ~0.1 ms).
SPIN_CYCLES = 400_000


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------- statistics


@dataclasses.dataclass
class Timing:
    """Per-call seconds of one implementation: median, quartiles, repetitions and,
    for host-bound cases, the median wall-clock time of a synchronised call."""

    median: float
    q1: float
    q3: float
    reps: int
    wall: float | None = None

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def spread(self) -> float:
        """IQR relative to the median."""
        return self.iqr / self.median if self.median > 0 else 0.0

    @classmethod
    def of(cls, samples: Sequence[float], wall: Sequence[float] | None = None) -> "Timing":
        ordered = sorted(samples)
        if len(ordered) >= 2:
            q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        else:
            q1 = q3 = ordered[0]
        return cls(statistics.median(ordered), q1, q3, len(ordered),
                   statistics.median(wall) if wall else None)


# ------------------------------------------------------------------------ L2 cache flush

_FLUSH: dict[str, torch.Tensor] = {}


def l2_flush_bytes(device) -> int:
    """Twice the device's L2 size (CUDA); 0 on CPU, whose caches are not flushed."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(dev)
    return 2 * int(getattr(props, "L2_cache_size", 0) or 64 << 20)


def flush_l2(device) -> None:
    """Overwrite the L2 cache with a memset of twice its size (no-op on CPU)."""
    nbytes = l2_flush_bytes(device)
    if not nbytes:
        return
    key = str(torch.device(device))
    buf = _FLUSH.get(key)
    if buf is None:
        buf = _FLUSH[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    buf.zero_()


# ------------------------------------------------------------------------------ timing


def measure(fns: dict[str, Callable[[], object]], device="cpu", *, warmup: int = 5,
            reps: int | None = None, budget_s: float = 0.5, min_reps: int = 10,
            max_reps: int = 200, flush: bool = False, wall: bool = False,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, Timing]:
    """Time every implementation in ``fns``, interleaved; returns a ``Timing`` each.

    ``reps`` fixed, or chosen so that all implementations together take about
    ``budget_s`` (clamped to ``[min_reps, max_reps]``). ``flush``: L2 flush before each
    call, and on a GPU the spin that lets the events time the kernels alone
    (memory-bound cases). ``wall``: also the synchronised wall-clock time per call
    (host-bound cases); on CPU the two are the same measurement. ``clock``: the CPU
    timer; ``time.thread_time`` (CPU time of the calling thread) times one-thread calls
    unaffected by other processes taking the cores, on a shared machine.
    """
    dev = torch.device(device)
    on_gpu = dev.type == "cuda"
    names = list(fns)
    for _ in range(max(1, warmup)):
        for fn in fns.values():
            fn()
    sync(dev)
    if reps is None:
        t0 = time.perf_counter()
        for fn in fns.values():
            fn()
        sync(dev)
        once = max(time.perf_counter() - t0, 1e-7)
        reps = int(min(max_reps, max(min_reps, budget_s / once)))
    events = {n: [] for n in names}
    cpu = {n: [] for n in names}
    walls = {n: [] for n in names}
    for k in range(reps):
        shift = k % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            if flush:
                flush_l2(dev)
            if on_gpu:
                if flush:
                    torch.cuda._sleep(SPIN_CYCLES)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                events[name].append((start, end))
            else:
                t0 = clock()
                fn()
                cpu[name].append(clock() - t0)
    if on_gpu:
        torch.cuda.synchronize(dev)
        for name in names:
            cpu[name] = [s.elapsed_time(e) / 1e3 for s, e in events[name]]
        if wall:
            # A separate pass: a sync inside the event pass would drain the queue before
            # every call and so change what the events measure.
            for k in range(reps):
                shift = k % len(names)
                for name in names[shift:] + names[:shift]:
                    if flush:
                        flush_l2(dev)
                    torch.cuda.synchronize(dev)
                    t0 = time.perf_counter()
                    fns[name]()
                    torch.cuda.synchronize(dev)
                    walls[name].append(time.perf_counter() - t0)
    elif wall:
        walls = cpu
    return {n: Timing.of(cpu[n], walls[n] if wall else None) for n in names}


@dataclasses.dataclass
class HostTiming:
    """Host seconds per call of one implementation: the best run and the median run of
    ``runs`` runs of ``calls`` back-to-back calls each."""

    best: float
    median: float
    runs: int
    calls: int


def host_time(fns: dict[str, Callable[[], object]], device="cpu", *, calls: int = 5000,
              runs: int = 5, warmup: int = 50, ops_per_call: int = 1,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, HostTiming]:
    """Host time per call of every implementation in ``fns``: ``runs`` runs of ``calls``
    calls each, implementations interleaved run by run (order rotated), best and median
    run. On CUDA the device is synchronised before a run and once at its end, inside the
    timed region: the figure is the rate a Python loop of enqueues sustains, and it
    includes the GPU only when the GPU is the slower of the two. ``ops_per_call``: each
    call does that many ops (a CUDA graph replay of several ops); times are per op.
    """
    dev = torch.device(device)
    names = list(fns)
    for _ in range(max(1, warmup)):
        for fn in fns.values():
            fn()
    sync(dev)
    samples = {n: [] for n in names}
    for k in range(runs):
        shift = k % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            sync(dev)
            t0 = clock()
            for _ in range(calls):
                fn()
            sync(dev)
            samples[name].append((clock() - t0) / (calls * ops_per_call))
    return {n: HostTiming(min(samples[n]), statistics.median(samples[n]), runs, calls)
            for n in names}


def time_fn(fn: Callable[[], object], device="cpu", *, warmup: int = 10,
            reps: int = 100) -> float:
    """Median seconds of ``fn()`` by ``measure`` (one implementation, nothing to compare)."""
    return measure({"fn": fn}, device, warmup=warmup, reps=reps)["fn"].median


def kernel_times(fn: Callable[[], object], *, reps: int = 1,
                 warmup: int = 0) -> dict[str, list[float]]:
    """The GPU kernels (and memsets) ``reps`` calls of ``fn`` launch, from the CUDA
    profiler: kernel name (first 60 characters) -> device microseconds of each launch. Not
    a timing of the call (``measure`` is), but where its device time goes."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(e.name[:60], []).append(e.device_time)
    return kernels


def gbps(bytes_moved: int, seconds: float) -> float:
    return bytes_moved / seconds / 1e9


# ------------------------------------------------------------------- machine and warnings


def load_warning() -> str | None:
    """A warning when the 1-minute load average says other work competes for the CPU
    (more than half the cores busy besides this process)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    if load - 1 > 0.5 * cores:
        return (f"machine loaded: load average {load:.1f} on {cores} cores; "
                "timings (host-bound ones most) are skewed by other processes")
    return None


def spread_warning(label: str, timing: Timing, limit: float = WIDE_SPREAD) -> str | None:
    if timing.spread > limit and timing.iqr > MIN_IQR_S:
        return (f"wide spread: {label}: IQR {timing.iqr * 1e6:.3g} us is "
                f"{100 * timing.spread:.0f}% of the median {timing.median * 1e6:.3g} us")
    return None


def device_name(device=None) -> str:
    dev = torch.device(device or default_device())
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def environment(device=None) -> dict:
    """Device, torch version and date: the header every recorded result carries."""
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.date.today().isoformat(),
        "threads": torch.get_num_threads(),
        "cores": os.cpu_count(),
        "load_average": load,
    }


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


def format_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """A plain-text table (also valid Markdown) of a list of dicts."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())

    def cell(v):
        if v is None:
            return ""
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
