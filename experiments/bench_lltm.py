"""LLTM benchmark: the C++/CUDA extension tutorial's protocol on every implementation.

The suite's LLTM cases (``suite_cases``), printed as one table: for each size (batch,
input_features, state_size), microseconds per iteration (``benchutil.measure``: median
after warm-up, the implementations interleaved; CUDA events on GPU, wall time on CPU) of

* forward: ``new_h, new_cell = cell(input, (old_h, old_cell))``;
* forward+backward: the same, then the gradients of the parameters for random output
  cotangents (``torch.autograd.grad``: no ``.grad`` accumulation, no loss kernels).

As in the tutorial, the parameters require grad and input and state do not. The cells:
the pure-PyTorch reference in eager mode and under ``torch.compile`` (on a CPU at full
scale only), and the op (C++ kernels on CPU, CUDA kernels on GPU) through ``lltm`` (its
autograd kernel is C++) and through ``LLTMFunction`` (the tutorial's Python
``autograd.Function``). Ratios are against the baselines in the same run; every cell is
first checked against eager. fp32, TF32 off. On CUDA a second table counts the GPU
kernels (and memsets) each iteration launches.

    python -m experiments.bench_lltm --device cuda [--quick | --tiny] [--json out.json] [--threads N]
    python -m experiments.bench_lltm --kernel-times [--op PATH]   # GPU time per kernel (CUDA)

On a small shared machine, ``--threads 1`` keeps a busy neighbour from stalling the
GEMMs' thread barriers (milliseconds per call on a 2-core VM with other load).
"""

from __future__ import annotations

import sys

import torch

import jit_loader
from experiments import benchutil
from ops.lltm.reference import LLTMReference

# The tutorial's size (launch-bound), a middle size where the forward is one GEMM of about
# 19M multiply-adds (host-bound in eager mode), a GEMM-bound size and the largest.
SIZES = [(16, 32, 128), (64, 128, 256), (256, 256, 1024), (4096, 512, 2048)]
# On CPU the largest size is too slow to time (two 129-GFLOP GEMMs per iteration).
CPU_SKIP = {(4096, 512, 2048)}
KERNEL_COUNT_COLUMNS = ["size", "impl", "kernels_fwd", "kernels_fwd_bwd"]


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
        return sum(len(v) for v in benchutil.kernel_times(fn).values())
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


def kernel_counts(device, sizes, with_compile: bool = True) -> list[dict]:
    """GPU kernels (and memsets) one iteration of each cell launches, per size (CUDA)."""
    _tf32_off()
    op = jit_loader.load("lltm")
    rows = []
    for size in sizes:
        for name, fns in _size_fns(op, device, size, with_compile).items():
            rows.append({"size": "x".join(map(str, size)), "impl": name,
                         "kernels_fwd": _count_kernels(fns["fwd"], device),
                         "kernels_fwd_bwd": _count_kernels(fns["fwd_bwd"], device)})
    return rows


def _tf32_off() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


# Suite sizes (experiments/bench.py); suite_cases names the targets of each.
SUITE_SIZES = {"tiny": SIZES[:1], "quick": SIZES[:3], "full": SIZES}
OURS = ("op lltm (C++ autograd)", "op LLTMFunction (Python)")


def suite_cases(device: str, scale: str,
                with_compile: bool | None = None) -> list[benchutil.Case | benchutil.Skipped]:
    """Forward and forward+backward per size, for the suite (fp32, TF32 off); on a CPU the
    largest size is listed as skipped.

    Baselines: the reference in eager mode and under torch.compile (on a CPU only at full
    scale: Inductor's C++ builds take minutes there; ``with_compile`` False: never).
    Targets: GPU, seed size: forward 3x and forward+backward 2.5x eager; GPU, middle size:
    forward+backward 2.5x eager; GPU, largest size: forward+backward at least
    torch.compile's speed; CPU, seed size: forward 1.3x eager."""
    on_gpu = torch.device(device).type == "cuda"
    if with_compile is None:
        with_compile = on_gpu or scale == "full"
    built = {}  # the cells of the last size: its two passes share one build

    def make(size, key):
        def build():
            if size not in built:
                built.clear()
                _tf32_off()
                built[size] = _size_fns(jit_loader.load("lltm"), device, size, with_compile)
            return {name: fns[key] for name, fns in built[size].items()}
        return build

    cases = []
    for size in SUITE_SIZES[scale]:
        batch, features, state = size
        if not on_gpu and size in CPU_SKIP:
            gemm_gflop = 2 * batch * (features + state) * 3 * state / 1e9
            cases.append(benchutil.Skipped("lltm", f"{'x'.join(map(str, size))} on cpu",
                                           f"two {gemm_gflop:.0f}-GFLOP GEMMs per iteration"))
            continue
        gemm = 2 * batch * (features + state) * 3 * state
        seed, middle, largest = size == SIZES[0], size == SIZES[1], size == SIZES[-1]
        for key, direction, flops in (("fwd", "forward", gemm),
                                      ("fwd_bwd", "forward+backward", 3 * gemm)):
            targets = {}
            if seed and on_gpu:
                targets["reference eager"] = 3.0 if key == "fwd" else 2.5
            elif seed and key == "fwd":
                targets["reference eager"] = 1.3
            if middle and on_gpu and key == "fwd_bwd":
                targets["reference eager"] = 2.5
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
    _tf32_off()
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
            per_kernel = benchutil.kernel_times(fn, reps=reps, warmup=5)
            label = "x".join(map(str, size))
            total = sum(sum(v) for v in per_kernel.values()) / reps
            rows.append({"size": label, "pass": name, "kernel": "(all)", "calls": None,
                         "us_per_iter": total})
            for kernel, times in sorted(per_kernel.items(), key=lambda kv: -sum(kv[1])):
                rows.append({"size": label, "pass": name, "kernel": kernel,
                             "calls": len(times) / reps, "us_per_iter": sum(times) / reps})
    return rows


def main(argv=None) -> int:
    from experiments import suite

    parser = suite.view_parser(__doc__)
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
            benchutil.save_json(args.json, rows, "lltm-kernels", KERNEL_COLUMNS, op=args.op or "ops/lltm")
        return 0
    status = suite.run_view(args, lambda device, scale: suite_cases(
        device, scale, with_compile=False if args.no_compile else None), "lltm")
    device = args.device or benchutil.default_device()
    if torch.device(device).type == "cuda":
        scale = "tiny" if args.tiny else "quick" if args.quick else "full"
        print("# GPU kernels and memsets per iteration")
        print(benchutil.format_table(kernel_counts(device, SUITE_SIZES[scale],
                                                   with_compile=not args.no_compile),
                                     KERNEL_COUNT_COLUMNS))
    return status


if __name__ == "__main__":
    sys.exit(main())
