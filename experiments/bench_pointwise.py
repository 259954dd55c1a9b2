"""Memory-bound activations: GB/s of the sigmoid and gelu ops, forward and backward.

The suite's sigmoid and gelu cases (``suite_cases``), printed as one table. Each row is
timed in the same run as its baselines: ``clone()`` of the same bytes (the copy speed at
the case's traffic); ``eager``, the same math in PyTorch ops (``torch.sigmoid``,
``(1 - y) * y * grad``, ``x * sigmoid(1.702 x)`` and its derivative formula) and, on a
GPU, ``torch.compile``, that math compiled; and the native twins
``aten.sigmoid_backward``, ``F.gelu`` (erf and tanh forms, not the same function) and
``aten.gelu_backward``. Bytes counted are the ideal traffic: forward reads x and writes y
(2 tensors), backward reads grad and the saved tensor and writes dx (3 tensors). Every
case is checked against the same math in float64 before it is timed.

GPU: up to 2^26 elements (2^20 and 2^26 with --quick). CPU: up to 2^22 elements (2^16
and 2^20 with --quick), without the compiled baselines (Inductor's C++ builds take
minutes there).

    python -m experiments.bench_pointwise [--device cuda] [--quick] [--json out.json]
    python -m experiments.bench_pointwise --device cpu --threads 1 --cpu-time  # loaded machine
"""

from __future__ import annotations

import functools
import sys

import torch
import torch.nn.functional as F

import jit_loader
from experiments import benchutil

ALPHA = 1.702


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


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Tolerance of a case's check against the same math in float64, per dtype.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


# Suite sizes (experiments/bench.py): elements per tensor, per device type and scale.
# Targets apply at the largest size (TARGET_SIZE), when in the run.
SUITE_SIZES = {"cuda": {"tiny": (2**10, 2**14), "quick": (2**20, 2**26), "full": (2**16, 2**20, 2**26)},
               "cpu": {"tiny": (2**10, 2**14), "quick": (2**16, 2**20), "full": (2**16, 2**20, 2**22)}}
TARGET_SIZE = {"cuda": 2**26, "cpu": 2**22}


def suite_cases(device: str, scale: str, dtypes=None) -> list[benchutil.Case]:
    """Forward and backward of sigmoid and gelu per size and dtype (``dtypes``: names of
    ``DTYPES``; default float32 and bfloat16, float32 alone at the tiny scale), for the
    suite.

    Targets (issue 5, at 2^26 elements on a GPU, 2^22 on a CPU): on a GPU every pass at least 90% of the copy
    bandwidth, GELU forward 3x the eager composite and 1.3x the compiled one; on a CPU
    GELU forward 1.5x the eager composite. Compiled baselines only on a GPU (Inductor's
    C++ builds take minutes on a small CPU)."""
    on_gpu = torch.device(device).type == "cuda"
    sizes = SUITE_SIZES[torch.device(device).type][scale]
    target_size = TARGET_SIZE[torch.device(device).type]
    if dtypes is None:
        dtypes = ("float32", "bfloat16") if scale != "tiny" else ("float32",)
    dtypes = [DTYPES[d] for d in dtypes]
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
            tol = TOLERANCE[dtype]
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


def main(argv=None) -> int:
    from experiments import suite

    parser = suite.view_parser(__doc__)
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=None,
                        help="default: float32 bfloat16 (float32 alone with --tiny)")
    args = parser.parse_args(argv)
    return suite.run_view(args, lambda device, scale: suite_cases(device, scale, args.dtypes),
                          "pointwise")


if __name__ == "__main__":
    sys.exit(main())
