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

    python -m experiments.bench_lltm --device cuda [--quick] [--json out.json] [--threads N]

On a small shared machine, ``--threads 1`` keeps a busy neighbour from stalling the
GEMMs' thread barriers (milliseconds per call on a 2-core VM with other load).
"""

from __future__ import annotations

import argparse
import statistics

import torch

import jit_loader
from experiments import benchutil
from ops.lltm.reference import LLTMReference

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
    args = parser.parse_args(argv)
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
