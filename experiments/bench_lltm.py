"""LLTM benchmark: the C++/CUDA extension tutorial's protocol on every implementation.

For each size (batch, input_features, state_size) it times, in microseconds per iteration
(median after warm-up, the implementations interleaved; ``benchutil.measure``: CUDA
events on GPU, wall time on CPU):

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

``suite_cases`` gives the same cells to the suite (experiments/bench.py).

On a small shared machine, ``--threads 1`` keeps a busy neighbour from stalling the
GEMMs' thread barriers (milliseconds per call on a 2-core VM with other load).
"""

from __future__ import annotations

import argparse

import torch

import jit_loader
from experiments import benchutil
from ops.lltm.reference import LLTMReference

SIZES = [(16, 32, 128), (256, 256, 1024), (4096, 512, 2048)]
# On CPU the largest size is too slow to time (two 129-GFLOP GEMMs per iteration).
CPU_SKIP = {(4096, 512, 2048)}
COLUMNS = ["size", "impl", "fwd_us", "fwd_bwd_us", "fwd_speedup", "fwd_bwd_speedup",
           "kernels_fwd", "kernels_fwd_bwd"]


def _cells(op, reference: LLTMReference, with_compile: bool = True):
    op_cell = op.LLTM(reference.input_features, reference.state_size).to(reference.weights.device)
    op_cell.load_state_dict(reference.state_dict())

    def function_cell(input, state):
        return op.LLTMFunction.apply(input, op_cell.weights, op_cell.bias, *state)

    cells = {"reference eager": (reference, list(reference.parameters()))}
    if with_compile:
        cells["reference torch.compile"] = (torch.compile(reference, dynamic=False),
                                            list(reference.parameters()))
    cells["op lltm (C++ autograd)"] = (op_cell, list(op_cell.parameters()))
    cells["op LLTMFunction (Python)"] = (function_cell, list(op_cell.parameters()))
    return cells


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


def _size_fns(op, device, size, with_compile: bool = True) -> dict[str, dict]:
    """{cell name: {"fwd": fn, "fwd_bwd": fn}} on fresh inputs, each cell checked against eager."""
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
    for name, (cell, params) in _cells(op, reference, with_compile).items():
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
    return timed


def _bench_size(op, device, size, budget_s) -> list[dict]:
    timed = _size_fns(op, device, size)
    # benchutil.measure interleaves the cells, so a slow spell of the machine (other
    # processes, clock changes) lands on all of them rather than on whichever cell ran then.
    us = {}
    for key in ("fwd", "fwd_bwd"):
        timings = benchutil.measure({name: fns[key] for name, fns in timed.items()}, device,
                                    warmup=3, budget_s=budget_s / 2, min_reps=5)
        us.update({(name, key): t.median * 1e6 for name, t in timings.items()})
    rows, eager = [], None
    for name, fns in timed.items():
        row = {"size": "x".join(map(str, size)), "impl": name,
               "fwd_us": us[name, "fwd"], "fwd_bwd_us": us[name, "fwd_bwd"],
               "kernels_fwd": _count_kernels(fns["fwd"], device),
               "kernels_fwd_bwd": _count_kernels(fns["fwd_bwd"], device)}
        eager = eager or row
        row["fwd_speedup"] = eager["fwd_us"] / row["fwd_us"]
        row["fwd_bwd_speedup"] = eager["fwd_bwd_us"] / row["fwd_bwd_us"]
        rows.append(row)
    return rows


# Suite sizes (experiments/bench.py); the seed size carries the targets of issue 4.
SUITE_SIZES = {"tiny": SIZES[:1], "quick": SIZES[:2], "full": SIZES}
OURS = ("op lltm (C++ autograd)", "op LLTMFunction (Python)")


def suite_cases(device: str, scale: str) -> list[benchutil.Case]:
    """Forward and forward+backward per size, for the suite (fp32, TF32 off).

    Baselines: the reference in eager mode and under torch.compile (on a CPU only at full
    scale: Inductor's C++ builds take minutes there). Targets (issue 4): GPU, seed size:
    forward 3x and forward+backward 2.5x eager; GPU, largest size: forward+backward at
    least torch.compile's speed; CPU, seed size: forward 1.3x eager."""
    on_gpu = torch.device(device).type == "cuda"
    with_compile = on_gpu or scale == "full"
    built = {}  # the cells of the last size: its two passes share one build

    def make(size, key):
        def build():
            if size not in built:
                built.clear()
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                torch.set_float32_matmul_precision("highest")
                built[size] = _size_fns(jit_loader.load("lltm"), device, size, with_compile)
            return {name: fns[key] for name, fns in built[size].items()}
        return build

    cases = []
    for size in SUITE_SIZES[scale]:
        if not on_gpu and size in CPU_SKIP:
            continue
        batch, features, state = size
        gemm = 2 * batch * (features + state) * 3 * state
        seed, largest = size == SIZES[0], size == SIZES[-1]
        for key, direction, flops in (("fwd", "forward", gemm),
                                      ("fwd_bwd", "forward+backward", 3 * gemm)):
            targets = {}
            if seed and on_gpu:
                targets["reference eager"] = 3.0 if key == "fwd" else 2.5
            elif seed and key == "fwd":
                targets["reference eager"] = 1.3
            if largest and on_gpu and key == "fwd_bwd":
                targets["reference torch.compile"] = 1.0
            cases.append(benchutil.Case(
                op="lltm", pass_=direction, shape="x".join(map(str, size)), dtype="float32",
                build=make(size, key), ours=OURS, flops=flops, targets=targets,
                host_bound=batch * state <= 16 * 1024))
    return cases


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
