"""Memory-bound activations: GB/s of the sigmoid and gelu ops, forward and backward.

Each row is timed in the same run as its baselines: ``clone()`` of the same tensor
(the copy ceiling, column ``% clone``); ``eager``, the same math in PyTorch ops
(``torch.sigmoid``, ``(1 - y) * y * grad``, ``x * sigmoid(1.702 x)`` and its derivative
formula) and ``compiled``, that math under ``torch.compile`` (columns ``x eager`` and
``x compiled``: our speed over theirs); and the native twins ``aten.sigmoid_backward``,
``F.gelu`` (erf and tanh forms, not the same function) and ``aten.gelu_backward``. Bytes
counted are the ideal traffic: forward reads x and writes y (2 tensors), backward
reads grad and the saved tensor and writes dx (3 tensors).

GPU: 2^26 elements (2^22 with --quick). CPU: 2^22 elements (2^20 with --quick),
without the compiled baselines (Inductor's C++ builds take minutes there). Timing:
``benchutil.measure`` (implementations interleaved, L2 flushed between calls).
``suite_cases`` gives the same cases, at several sizes, to the suite (experiments/bench.py).

    python -m experiments.bench_pointwise [--device cuda] [--quick] [--json out.json]
    python -m experiments.bench_pointwise --device cpu --threads 1 --cpu-time  # loaded machine
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import torch
import torch.nn.functional as F

import jit_loader
from experiments import benchutil

ALPHA = 1.702
COLUMNS = ["dtype", "op", "pass", "impl", "us", "GB/s", "% clone", "x eager", "x compiled"]


def gelu_composite(x):
    return x * torch.sigmoid(ALPHA * x)


def gelu_backward_composite(grad, x):
    s = torch.sigmoid(ALPHA * x)
    return grad * (s + ALPHA * x * s * (1 - s))


def sigmoid_backward_composite(grad, y):
    return grad * (1 - y) * y


def _groups(x, y, grad, ops=("sigmoid", "gelu")):
    """(op, pass, tensors moved, ours, the same math in PyTorch ops, native twins, args)
    for each of ``ops`` (only those are looked up: the others need not be loaded)."""
    groups = []
    if "sigmoid" in ops:
        groups += [
            ("sigmoid", "forward", 2, torch.ops.sigmoid.forward, torch.sigmoid, {}, (x,)),
            ("sigmoid", "backward", 3, torch.ops.sigmoid.backward, sigmoid_backward_composite,
             {"aten.sigmoid_backward": torch.ops.aten.sigmoid_backward}, (grad, y)),
        ]
    if "gelu" in ops:
        groups += [
            ("gelu", "forward", 2, torch.ops.gelu.forward, gelu_composite,
             {"F.gelu": F.gelu, "F.gelu tanh": functools.partial(F.gelu, approximate="tanh")}, (x,)),
            ("gelu", "backward", 3, torch.ops.gelu.backward, gelu_backward_composite,
             {"aten.gelu_backward": torch.ops.aten.gelu_backward}, (grad, x)),
        ]
    return groups


def _check(x, y, grad, dtype):
    """Fail loudly rather than report the speed of a wrong answer."""
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    pairs = [
        (torch.ops.sigmoid.forward(x), torch.sigmoid(x)),
        (torch.ops.sigmoid.backward(grad, y), torch.ops.aten.sigmoid_backward(grad, y)),
        (torch.ops.gelu.forward(x), gelu_composite(x.double())),
        (torch.ops.gelu.backward(grad, x), gelu_backward_composite(grad.double(), x.double())),
    ]
    for got, want in pairs:
        torch.testing.assert_close(got.double(), want.double(), atol=tol, rtol=tol)


def problem_size(device, quick: bool) -> int:
    if torch.device(device).type == "cuda":
        return 2**22 if quick else 2**26
    return 2**20 if quick else 2**22


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def run(device=None, quick: bool = False, dtypes=None, cpu_time: bool = False) -> list[dict]:
    """Measure every row; returns them as dicts with the COLUMNS keys. ``cpu_time`` (CPU,
    one thread): time by the calling thread's CPU time rather than the wall clock."""
    device = torch.device(device or benchutil.default_device())
    on_gpu = device.type == "cuda"
    numel = problem_size(device, quick)
    reps = 50 if on_gpu else (15 if quick else 40)
    jit_loader.load("sigmoid")
    jit_loader.load("gelu")

    rows = []
    if dtypes is None:
        dtypes = ["float32", "bfloat16"] + ([] if on_gpu else ["float16"])
    for dtype in (DTYPES[d] for d in dtypes):
        x = torch.randn(numel, device=device).mul_(3).to(dtype)
        y = torch.sigmoid(x)
        grad = torch.randn(numel, device=device).to(dtype)
        _check(x, y, grad, dtype)
        elem = x.element_size()

        def measure(fns):
            # Interleaved, L2 flushed between calls: benchutil's protocol for memory-bound ops.
            timings = benchutil.measure(fns, device, warmup=5 if on_gpu else 2, reps=reps, flush=True,
                                        clock=time.thread_time if cpu_time else time.perf_counter)
            return {name: t.median for name, t in timings.items()}

        clone_s = measure({"clone": x.clone})["clone"]
        clone_gbps = benchutil.gbps(2 * numel * elem, clone_s)
        name = str(dtype).removeprefix("torch.")
        rows.append({"dtype": name, "op": "copy", "pass": "", "impl": "clone()",
                     "us": clone_s * 1e6, "GB/s": clone_gbps, "% clone": 100.0})
        for op, direction, tensors, ours, math, natives, args in _groups(x, y, grad):
            nbytes = tensors * numel * elem
            fns = {"ours": lambda: ours(*args), "eager": lambda: math(*args)}
            if on_gpu:
                compiled = torch.compile(math, fullgraph=True, dynamic=False)
                fns["compiled"] = lambda: compiled(*args)
            fns.update({impl: lambda fn=fn: fn(*args) for impl, fn in natives.items()})
            times = measure(fns)
            for impl, seconds in times.items():
                row = {"dtype": name, "op": op, "pass": direction, "impl": impl, "us": seconds * 1e6,
                       "GB/s": benchutil.gbps(nbytes, seconds),
                       "% clone": 100 * benchutil.gbps(nbytes, seconds) / clone_gbps}
                if impl == "ours":
                    row["x eager"] = times["eager"] / seconds
                    if "compiled" in times:
                        row["x compiled"] = times["compiled"] / seconds
                rows.append(row)
        del x, y, grad
    return rows


# Suite sizes (experiments/bench.py): elements per tensor, per device type and scale.
# Targets apply at the size of this script's own table (problem_size), when in the run.
SUITE_SIZES = {"cuda": {"tiny": (2**10, 2**14), "quick": (2**20, 2**26), "full": (2**16, 2**20, 2**26)},
               "cpu": {"tiny": (2**10, 2**14), "quick": (2**16, 2**20), "full": (2**16, 2**20, 2**22)}}


def suite_cases(device: str, scale: str) -> list[benchutil.Case]:
    """Forward and backward of sigmoid and gelu per size and dtype, for the suite.

    Targets (issue 5, at 2^26 elements on a GPU, 2^22 on a CPU): on a GPU every pass at least 90% of the copy
    bandwidth, GELU forward 3x the eager composite and 1.3x the compiled one; on a CPU
    GELU forward 1.5x the eager composite. Compiled baselines only on a GPU (Inductor's
    C++ builds take minutes on a small CPU)."""
    on_gpu = torch.device(device).type == "cuda"
    sizes = SUITE_SIZES[torch.device(device).type][scale]
    target_size = problem_size(device, quick=False)
    dtypes = (torch.float32, torch.bfloat16) if scale != "tiny" else (torch.float32,)
    compiled = {}

    def build(op, direction, numel, dtype):
        def make():
            jit_loader.load(op)
            x = torch.randn(numel, device=device).mul_(3).to(dtype)
            y = torch.sigmoid(x)
            grad = torch.randn(numel, device=device).to(dtype)
            _, _, _, ours, math, natives, args = next(
                g for g in _groups(x, y, grad, (op,)) if g[1] == direction)
            # Fail loudly rather than report the speed of a wrong answer.
            tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
            torch.testing.assert_close(ours(*args).double(), math(*(a.double() for a in args)),
                                       atol=tol, rtol=tol)
            fns = {"ours": lambda: ours(*args), "eager": lambda: math(*args)}
            if on_gpu:
                if math not in compiled:
                    compiled[math] = torch.compile(math, fullgraph=True, dynamic=False)
                compiled_math = compiled[math]
                fns["torch.compile"] = lambda: compiled_math(*args)
            fns.update({impl: lambda fn=fn: fn(*args) for impl, fn in natives.items()})
            return fns
        return make

    cases = []
    for numel in sizes:
        last = numel == target_size
        for dtype in dtypes:
            for op, direction, tensors in [("sigmoid", "forward", 2), ("sigmoid", "backward", 3),
                                           ("gelu", "forward", 2), ("gelu", "backward", 3)]:
                targets = {}
                if last and on_gpu:
                    targets[benchutil.COPY] = 0.9
                    if (op, direction) == ("gelu", "forward"):
                        targets.update({"eager": 3.0, "torch.compile": 1.3})
                elif last and (op, direction) == ("gelu", "forward"):
                    targets["eager"] = 1.5
                cases.append(benchutil.Case(
                    op=op, pass_=direction, shape=f"2^{numel.bit_length() - 1}",
                    dtype=str(dtype).removeprefix("torch."), build=build(op, direction, numel, dtype),
                    bytes=tensors * numel * torch.tensor([], dtype=dtype).element_size(),
                    targets=targets, host_bound=numel <= 2**16))
    return cases


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when visible)")
    parser.add_argument("--quick", action="store_true", help="smaller tensors, fewer repetitions")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows here")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=None,
                        help="default: float32 bfloat16 on GPU, and float16 too on CPU")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="CPU with --threads 1: time by the thread's CPU time (for a loaded machine)")
    args = parser.parse_args(argv)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1 (other threads' work is not the caller's CPU time)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or benchutil.default_device()
    rows = run(device, quick=args.quick, dtypes=args.dtypes, cpu_time=args.cpu_time)
    env = benchutil.environment()
    numel = problem_size(device, args.quick)
    header = (f"# bench_pointwise: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), "
              f"{env['date']}, {env['threads']} threads, 2^{numel.bit_length() - 1} elements")
    if torch.device(device).type == "cpu":
        header += f", load average {os.getloadavg()[0]:.1f} (other processes skew CPU timings)"
        if args.cpu_time:
            header += ", timed by the thread's CPU time"
    print(header)
    print(benchutil.format_table(rows, COLUMNS))
    if torch.device(device).type == "cpu":
        print(f"# load average after the run: {os.getloadavg()[0]:.1f}")
    if args.json:
        benchutil.save_json(args.json, rows, numel=numel, quick=args.quick)


if __name__ == "__main__":
    main()
