"""LLTM benchmark: the C++/CUDA extension tutorial's protocol on every implementation.

For each size (batch, input_features, state_size) it times, in microseconds per iteration
(median after warm-up, in three rounds that interleave the implementations, median of
the rounds; CUDA events on GPU, synchronised wall time on CPU):

* forward: ``new_h, new_cell = cell(input, (old_h, old_cell))``;
* forward+backward: the same, then the gradients of the parameters for random output
  cotangents (``torch.autograd.grad``: no ``.grad`` accumulation, no loss kernels).

As in the tutorial, the parameters require grad and input and state do not. The cells:
the pure-PyTorch reference in eager mode and under ``torch.compile``, and the op (C++
kernels on CPU, CUDA kernels on GPU) through ``lltm`` (its autograd kernel is C++) and
through ``LLTMFunction`` (the tutorial's Python ``autograd.Function``). Speedups are
against eager in the same run; every cell is first checked against eager. fp32, TF32 off.
On CUDA the table also counts the GPU kernels (and memsets) each iteration launches.

    python experiments/bench_lltm.py --device cuda [--quick] [--json out.json] [--threads N]
    python experiments/bench_lltm.py --kernel-times [--op PATH]   # CUDA only

``--kernel-times`` reports instead the GPU time of the op's own calls
(``torch.ops.lltm.forward`` and ``backward``, all five gradients), per kernel, from the
profiler: the kernels' speed without the host overhead that dominates the small sizes.
``--op PATH`` loads another copy of the op (e.g. an earlier version) to compare.

On a small shared machine, ``--threads 1`` keeps a busy neighbour from stalling the
GEMMs' thread barriers (milliseconds per call on a 2-core VM with other load).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jit_loader  # noqa: E402
from experiments import benchutil  # noqa: E402
from ops.lltm.reference import LLTMReference  # noqa: E402

SIZES = [(16, 32, 128), (256, 256, 1024), (4096, 512, 2048)]
# On CPU the largest size is too slow to time (two 129-GFLOP GEMMs per iteration).
CPU_SKIP = {(4096, 512, 2048)}
ROUNDS = 3
COLUMNS = ["size", "impl", "fwd_us", "fwd_bwd_us", "fwd_speedup", "fwd_bwd_speedup",
           "kernels_fwd", "kernels_fwd_bwd"]


def _cells(op, reference: LLTMReference):
    op_cell = op.LLTM(reference.input_features, reference.state_size).to(reference.weights.device)
    op_cell.load_state_dict(reference.state_dict())

    def function_cell(input, state):
        return op.LLTMFunction.apply(input, op_cell.weights, op_cell.bias, *state)

    return {
        "reference eager": (reference, list(reference.parameters())),
        "reference torch.compile": (torch.compile(reference, dynamic=False),
                                    list(reference.parameters())),
        "op lltm (C++ autograd)": (op_cell, list(op_cell.parameters())),
        "op LLTMFunction (Python)": (function_cell, list(op_cell.parameters())),
    }


def _count_kernels(fn, device) -> int | None:
    if torch.device(device).type != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # profiling is a diagnostic; never fail the benchmark on it
        return None


def _time_us(fn, device, budget_s: float) -> float:
    once = benchutil.time_fn(fn, device, warmup=3, reps=3)
    reps = int(min(200, max(5, budget_s / max(once, 1e-7))))
    return benchutil.time_fn(fn, device, warmup=min(10, reps), reps=reps) * 1e6


def _bench_size(op, device, size, budget_s) -> list[dict]:
    batch, features, state = size
    torch.manual_seed(sum(size))
    reference = LLTMReference(features, state).to(device)
    x = torch.randn(batch, features, device=device)
    h = torch.randn(batch, state, device=device)
    c = torch.randn(batch, state, device=device)
    cotangents = (torch.randn(batch, state, device=device), torch.randn(batch, state, device=device))

    with torch.no_grad():
        want = reference(x, (h, c))
    timed = {}
    for name, (cell, params) in _cells(op, reference).items():
        def forward(cell=cell):
            return cell(x, (h, c))

        def forward_backward(cell=cell, params=params):
            return torch.autograd.grad(cell(x, (h, c)), params, cotangents)

        got = forward()
        for g, w in zip(got, want):
            torch.testing.assert_close(g.detach(), w, atol=1e-4, rtol=1e-3,
                                       msg=lambda m: f"{name} disagrees with eager: {m}")
        forward_backward()
        timed[name] = {"fwd": forward, "fwd_bwd": forward_backward}
    # Rounds interleave the cells, so a slow spell of the machine (other processes, clock
    # changes) lands on all of them rather than on whichever cell ran then.
    samples = {name: {key: [] for key in fns} for name, fns in timed.items()}
    for _ in range(ROUNDS):
        for name, fns in timed.items():
            for key, fn in fns.items():
                samples[name][key].append(_time_us(fn, device, budget_s / ROUNDS))
    rows, eager = [], None
    for name, fns in timed.items():
        row = {"size": "x".join(map(str, size)), "impl": name,
               "fwd_us": statistics.median(samples[name]["fwd"]),
               "fwd_bwd_us": statistics.median(samples[name]["fwd_bwd"]),
               "kernels_fwd": _count_kernels(fns["fwd"], device),
               "kernels_fwd_bwd": _count_kernels(fns["fwd_bwd"], device)}
        eager = eager or row
        row["fwd_speedup"] = eager["fwd_us"] / row["fwd_us"]
        row["fwd_bwd_speedup"] = eager["fwd_bwd_us"] / row["fwd_bwd_us"]
        rows.append(row)
    return rows


KERNEL_COLUMNS = ["size", "pass", "kernel", "calls", "us_per_iter"]


def kernel_times(op_path=None, reps: int = 30) -> list[dict]:
    """Profiler GPU time per iteration of each kernel of the op's forward and backward."""
    from torch.profiler import ProfilerActivity, profile
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    jit_loader.load(op_path or "lltm")
    rows = []
    for size in SIZES:
        batch, features, state = size
        torch.manual_seed(sum(size))
        new = lambda *shape: torch.randn(*shape, device="cuda")  # noqa: E731
        args = (new(batch, features), new(3 * state, state + features) / state ** 0.5,
                new(3 * state), new(batch, state), new(batch, state))
        new_h, new_cell, gates, hx = torch.ops.lltm.forward(*args)
        grads = (new(batch, state), new(batch, state))
        passes = {"forward": lambda: torch.ops.lltm.forward(*args),
                  "backward": lambda: torch.ops.lltm.backward(*grads, new_cell, gates, hx, args[1],
                                                              [True] * 5)}
        for name, fn in passes.items():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    fn()
                torch.cuda.synchronize()
            per_kernel: dict[str, list[float]] = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    per_kernel.setdefault(e.name[:60], []).append(e.device_time)
            label = "x".join(map(str, size))
            total = sum(sum(v) for v in per_kernel.values()) / reps
            rows.append({"size": label, "pass": name, "kernel": "(all)", "calls": None,
                         "us_per_iter": total})
            for kernel, times in sorted(per_kernel.items(), key=lambda kv: -sum(kv[1])):
                rows.append({"size": label, "pass": name, "kernel": kernel,
                             "calls": len(times) / reps, "us_per_iter": sum(times) / reps})
    return rows


def run(device: str | None = None, quick: bool = False) -> list[dict]:
    """Benchmark rows (see COLUMNS) for every size; ``quick``: the tutorial's size only."""
    device = device or benchutil.default_device()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    op = jit_loader.load("lltm")
    sizes = SIZES[:1] if quick else SIZES
    rows = []
    for size in sizes:
        if torch.device(device).type == "cpu" and size in CPU_SKIP:
            batch, features, state = size
            gemm_gflop = 2 * batch * (features + state) * 3 * state / 1e9
            rows.append({"size": "x".join(map(str, size)),
                         "impl": f"(skipped on CPU: two {gemm_gflop:.0f}-GFLOP GEMMs per iteration)"})
            continue
        rows += _bench_size(op, device, size, budget_s=0.3 if quick else 1.0)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=benchutil.default_device())
    parser.add_argument("--quick", action="store_true", help="the tutorial's size only")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--kernel-times", action="store_true",
                        help="GPU time per kernel of the op's forward and backward (CUDA)")
    parser.add_argument("--op", default=None, metavar="PATH",
                        help="with --kernel-times: the op folder to load (default: ops/lltm)")
    args = parser.parse_args(argv)
    if args.kernel_times:
        rows = kernel_times(args.op)
        env = benchutil.environment()
        print(f"LLTM kernel times ({args.op or 'ops/lltm'}): "
              + ", ".join(f"{k} {v}" for k, v in env.items()))
        print(benchutil.format_table([{k: "-" if v is None else v for k, v in row.items()}
                                      for row in rows], KERNEL_COLUMNS))
        if args.json:
            benchutil.save_json(args.json, rows, op=args.op or "ops/lltm")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    env = benchutil.environment()
    rows = run(args.device, args.quick)
    print(f"LLTM, {args.device}: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    print("fp32, TF32 off; *_us: microseconds per iteration (median); speedup: eager time / "
          "this time; kernels: GPU kernels and memsets per iteration (CUDA only)")
    shown = [{k: "-" if v is None else v for k, v in row.items()} for row in rows]
    print(benchutil.format_table(shown, COLUMNS))
    if args.json:
        benchutil.save_json(args.json, rows, device_arg=args.device, quick=args.quick)


if __name__ == "__main__":
    main()
