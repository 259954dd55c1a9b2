"""The one timing protocol: ``jit_loader.bench``, every benchmark script of experiments/, the
suite and notebook 04 time with it.

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
scripts (views of the suite's cases), ``jit_loader.bench`` (an op against its baselines,
jit_tools/tools/bench.py) and every other script time with it; ``time_fn`` is its median
for one callable; ``kernel_times`` (the CUDA profiler) says which kernels a call launches
and where its device time goes. Installed with the package (experiments/ is not), so a
project of its own times its ops as this repository does.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import statistics
import time
from typing import Callable, Sequence

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
