"""``jit_loader.bench``: an op against its baselines, timed with the benchmark suite's
protocol (jit_tools/tools/timing.py), in one call from a script or a notebook cell::

    import jit_loader
    from ops.my_op.reference import my_op_reference
    op = jit_loader.load("my_op")
    print(jit_loader.bench(op.my_op, x, weight, baselines={"eager": my_op_reference}))

Every baseline is also timed compiled (``torch.compile(fullgraph=True)``; by default on a
GPU only: Inductor's C++ builds take minutes on a small CPU). Before anything is timed,
every implementation's result is checked against the first baseline's (a wrong answer's
speed is not reported). ``bytes`` (the ideal traffic of one call: what it must read and
write) makes the case memory-bound: the L2 cache is flushed between calls and GB/s are
reported. ``backward=True`` times forward and backward (the first floating tensor
arguments get ``requires_grad``). The result prints as a table; ``ratio`` is the
baseline's time over ours (> 1: ours is faster), as in the suite.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from jit_tools.tools import timing

# Agreement asked of every implementation with the first baseline, per result dtype
# (compiled code may fuse and round in another order).
TOLERANCES = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@dataclasses.dataclass
class BenchResult:
    """The timings of one ``bench`` call: ``timings[name]`` (a ``timing.Timing``, seconds),
    ``ratios[baseline]`` (the baseline's median over ours), the rows of its table and the
    warnings of the run (a loaded machine, a wide spread)."""

    ours: str
    device: str
    timings: dict[str, timing.Timing]
    bytes: int | None
    warnings: list[str]

    @property
    def ratios(self) -> dict[str, float]:
        mine = self.timings[self.ours].median
        return {n: t.median / mine for n, t in self.timings.items() if n != self.ours}

    def rows(self) -> list[dict]:
        out = []
        for name, t in self.timings.items():
            row = {"impl": name, "median us": t.median * 1e6, "IQR us": t.iqr * 1e6}
            if self.bytes:
                row["GB/s"] = timing.gbps(self.bytes, t.median)
            row["ratio"] = None if name == self.ours else self.ratios[name]
            out.append(row)
        return out

    def __str__(self) -> str:
        lines = [f"# {self.device}, torch {torch.__version__}; ratio: baseline time / {self.ours} "
                 "time (> 1: ours faster)"]
        lines += [f"# warning: {w}" for w in self.warnings]
        return "\n".join(lines + [timing.format_table(self.rows())])

    __repr__ = __str__


def _device_of(args) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return str(a.device)
    return timing.default_device()


def _first_tensor(out):
    if isinstance(out, (tuple, list)):
        return next(o for o in out if isinstance(o, torch.Tensor))
    return out


def _check(results: dict[str, object], reference: str) -> None:
    want = _first_tensor(results[reference])
    for name, got in results.items():
        got = _first_tensor(got)
        tol = TOLERANCES.get(want.dtype, 0.0)
        try:
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)
        except AssertionError as e:
            raise AssertionError(f"bench: {name} disagrees with {reference}, so nothing was timed: "
                                 f"{str(e).splitlines()[0]}") from None


def bench(fn: Callable, *args, baselines: dict[str, Callable] | None = None,
          compile: bool | None = None, backward: bool = False, bytes: int | None = None,
          host_bound: bool = False, check: bool = True, name: str = "ours",
          reps: int | None = None, budget_s: float = 0.5, warmup: int = 5,
          device: str | None = None) -> BenchResult:
    """Time ``fn(*args)`` against each ``baselines`` entry called with the same arguments
    (and, with ``compile`` (default: on a GPU), each baseline under ``torch.compile``), with
    the suite's protocol: warm-up, implementations interleaved, median and IQR of many calls,
    CUDA events on a GPU. ``bytes``: the ideal traffic of one call (L2 flushed between calls,
    GB/s reported); ``host_bound``: also the synchronised wall time; ``backward``: forward
    and backward of the first result for one fixed gradient; ``check``: every result is
    compared with the first baseline's before timing."""
    device = device or _device_of(args)
    on_gpu = torch.device(device).type == "cuda"
    compile = on_gpu if compile is None else compile
    impls = {name: fn, **(baselines or {})}
    if compile:
        for label, base in (baselines or {}).items():
            impls[f"torch.compile({label})"] = torch.compile(base, fullgraph=True, dynamic=False)
    if backward:
        args = tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point()
                     else a for a in args)
    results = {label: f(*args) for label, f in impls.items()}
    if check and baselines:
        _check({k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in results.items()},
               next(iter(baselines)))
    if backward:
        grad = torch.randn_like(_first_tensor(results[name]))
        calls = {label: (lambda f=f: _first_tensor(f(*args)).backward(grad)) for label, f in impls.items()}
    else:
        calls = {label: (lambda f=f: f(*args)) for label, f in impls.items()}
    timings = timing.measure(calls, device, warmup=warmup, reps=reps, budget_s=budget_s,
                             flush=bytes is not None, wall=host_bound)
    warnings = [w for w in [timing.load_warning(),
                            *(timing.spread_warning(label, t) for label, t in timings.items())] if w]
    return BenchResult(name, timing.device_name(device), timings, bytes, warnings)
