"""Where the elementwise launcher loses bandwidth: variants of the gelu forward (unroll
depth, grid cap in waves of resident blocks or none, accurate or fast exp) and the
identity through the same launcher, next to ``clone()``, at 2^26 float32 and bfloat16
elements.

Each variant is timed two ways: per call between CUDA events (as bench_pointwise.py does),
and as the kernel time the profiler records (no launch gaps). If a variant is slow per
call but not in the profiler, the gap is on the host side, not in the kernel.

    python -m experiments.pointwise_variants [--json out.json]      # CUDA only
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

import jit_loader
from experiments import benchutil

NUMEL = 2**26
COLUMNS = ["dtype", "impl", "event_us", "kernel_us", "% clone (event)", "% clone (kernel)"]
VARIANTS = [(math, unroll, waves) for math in ("identity", "gelu_accurate", "gelu_fast")
            for unroll in (1, 2, 4) for waves in (1, 4, 0)]


def kernel_us(fn, reps: int = 20) -> float:
    """Median GPU kernel time of ``fn`` per call, from the profiler (one kernel each)."""
    return statistics.median(t for times in benchutil.kernel_times(fn, reps=reps, warmup=1).values()
                             for t in times)


def run() -> list[dict]:
    jit_loader.load(ROOT / "experiments" / "kernels" / "pointwise_variants")
    op = torch.ops.pointwise_variants.forward
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(NUMEL, device="cuda") * 3).to(dtype)
        want = (x.double() * torch.sigmoid(1.702 * x.double()))
        impls = {"clone()": lambda: x.clone(), "torch.sigmoid": lambda: torch.sigmoid(x)}
        for math, unroll, waves in VARIANTS:
            got = op(x, math, unroll, waves)
            expected = x if math == "identity" else want
            torch.testing.assert_close(got.double(), expected.double(), atol=1e-2, rtol=1e-2)
            impls[f"{math} u{unroll} w{waves}"] = (
                lambda m=math, u=unroll, w=waves: op(x, m, u, w))
        base = None
        for name, fn in impls.items():
            event = benchutil.time_fn(fn, "cuda", warmup=5, reps=50) * 1e6
            kernel = kernel_us(fn)
            base = base or (event, kernel)
            rows.append({"dtype": str(dtype).removeprefix("torch."), "impl": name,
                         "event_us": event, "kernel_us": kernel,
                         "% clone (event)": 100 * base[0] / event,
                         "% clone (kernel)": 100 * base[1] / kernel})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    rows = run()
    env = benchutil.environment()
    print(f"# pointwise_variants: {env['device']}, torch {env['torch']}, {env['date']}, "
          f"2^{NUMEL.bit_length() - 1} elements; u: unroll, w: grid cap in waves "
          "(0: no cap, one block per 256 x unroll vectors, the ops' setting)")
    print(benchutil.format_table(rows, COLUMNS))
    if args.json:
        benchutil.save_json(args.json, rows, numel=NUMEL)


if __name__ == "__main__":
    main()
