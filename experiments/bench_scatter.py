"""Benchmark of the scatter op on a graph-style workload: messages [edges, features] reduced
into [nodes, features] by their target node, with a random and a sorted index, against
torch's index_add_, scatter_add_ and scatter_reduce measured in the same run; forward and
forward+backward; GB/s next to the device's copy speed for the same bytes (a clone).

The suite's scatter cases (``suite_cases``), printed as one table.

    python -m experiments.bench_scatter                  # the suite's full size on this device
    python -m experiments.bench_scatter --edges 200000 --json $OUT/bench_scatter.json
    python -m experiments.bench_scatter --tiny --device cpu

Targets (issue 14): random sum >= scatter_add_; sorted sum >= 2x scatter_add_; mean and
max >= 1.5x scatter_reduce. "ours" of max is torch_scatter's scatter(reduce="max"): values
only, as scatter_reduce gives; "ours scatter_max values+arg" also returns the arg
positions (what backward needs). Beside sum, ``src.sum()`` reads src alone (src is 90% of
the op's bytes at the issue's size): the read ceiling of a read-bound op.
"""

from __future__ import annotations

import sys

import torch

import jit_loader
from experiments import benchutil


def main(argv=None) -> int:
    from experiments import suite

    parser = suite.view_parser(__doc__)
    parser.add_argument("--edges", type=int, help="edges (default: the scale's size)")
    parser.add_argument("--features", type=int, help="features per edge")
    parser.add_argument("--nodes", type=int, help="nodes")
    args = parser.parse_args(argv)

    def cases(device, scale):
        size = SUITE_SIZES[torch.device(device).type][scale]
        given = (args.edges, args.features, args.nodes)
        return suite_cases(device, scale, tuple(g or d for g, d in zip(given, size)))

    return suite.run_view(args, cases, "scatter")


# ------------------------------------------------------------------------ the suite's cases

# (edges, features, nodes) per device type and scale; the GPU's full size is the issue's.
SUITE_SIZES = {"cuda": {"tiny": (4096, 16, 256), "quick": (500_000, 64, 25_000),
                        "full": (2_000_000, 64, 100_000)},
               "cpu": {"tiny": (4096, 16, 256), "quick": (100_000, 64, 5_000),
                       "full": (500_000, 64, 25_000)}}
# Our variants timed beside "ours", by (reduce, order) and by reduce.
SUITE_ALSO = {("sum", "random"): ("ours deterministic",), "sum": ("ours no bounds check",),
              "max": ("ours scatter_max values+arg",)}
SUITE_READ = "src.sum() (reads src)"
# Issue 14's targets (forward, at the GPU workload): random sum >= 1x scatter_add_, sorted
# sum >= 2x scatter_add_, mean and max >= 1.5x scatter_reduce (random and sorted).
SUITE_TARGETS = {("sum", "random"): 1.0, ("sum", "sorted"): 2.0, ("mean", "random"): 1.5,
                 ("mean", "sorted"): 1.5, ("max", "random"): 1.5, ("max", "sorted"): 1.5}


def _suite_count(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % (div // 10) == 0:
            return f"{n / div:g}{unit}"
    return str(n)


def suite_cases(device: str, scale: str,
                size: tuple[int, int, int] | None = None) -> list[benchutil.Case]:
    """The graph workload for the suite (experiments/bench.py): messages [E, F] reduced
    into [N, F] by a random and a sorted target index, float32; ``size`` (edges,
    features, nodes) in place of the scale's.

    Forward: sum against ``scatter_add_``, ``index_add_`` and ``src.sum()`` (the read
    ceiling), with our sum without the bounds check beside it (and with a random index our
    deterministic sum); mean, max and min against ``scatter_reduce`` ("mean", "amax",
    "amin", include_self=False), with ``scatter_max`` (values and arg positions) beside
    max; forward+backward (gradient of src, random index) of sum,
    mean and max against torch autograd through the same baselines. Targets (issue 14)
    on the forward passes at the issue's workload on a GPU (2M edges, 64 features, 100k
    nodes). Each case checks its answer against the baseline before it is timed."""
    dev_type = torch.device(device).type
    edges, features, nodes = size or SUITE_SIZES[dev_type][scale]
    issue_size = dev_type == "cuda" and (edges, features, nodes) == SUITE_SIZES["cuda"]["full"]
    label = f"{_suite_count(edges)}x{features}->{_suite_count(nodes)}"
    moved = edges * features * 4 + edges * 8 + nodes * features * 4  # read src, index; write out
    cases = []
    for order in ("random", "sorted"):
        for reduce in ("sum", "mean", "max", "min"):
            baseline = "scatter_add_" if reduce == "sum" else f"scatter_reduce {reduce}"
            target = SUITE_TARGETS.get((reduce, order)) if issue_size else None
            ours = ("ours",) + SUITE_ALSO.get((reduce, order), ()) + SUITE_ALSO.get(reduce, ())
            cases.append(benchutil.Case(
                op="scatter", pass_="forward", shape=f"{reduce} {label} {order}",
                dtype="float32", build=_suite_build(device, edges, features, nodes, order, reduce),
                ours=ours, bytes=moved, targets={baseline: target} if target else {},
                host_bound=edges * features <= 2**16))
    for reduce in ("sum", "mean", "max"):
        cases.append(benchutil.Case(
            op="scatter", pass_="forward+backward", shape=f"{reduce} {label} random",
            dtype="float32",
            build=_suite_build(device, edges, features, nodes, "random", reduce, backward=True),
            host_bound=edges * features <= 2**16))
    return cases


def _suite_build(device, edges, features, nodes, order, reduce, backward=False):
    def build():
        op = jit_loader.load("scatter")
        src = torch.randn(edges, features, device=device)
        index = torch.randint(0, nodes, (edges,), device=device)
        if order == "sorted":
            index = index.sort().values
        hint = True if order == "sorted" else None
        expanded = index.view(-1, 1).expand_as(src)
        torch_reduce = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}[reduce]
        name = "scatter_add_" if reduce == "sum" else f"scatter_reduce {reduce}"

        def theirs(s):
            if reduce == "sum":
                return s.new_zeros(nodes, features).scatter_add(0, expanded, s)
            return s.new_zeros(nodes, features).scatter_reduce(0, expanded, s, torch_reduce,
                                                               include_self=False)

        def mine(s, **options):
            return op.scatter(s, index, 0, None, nodes, reduce, index_sorted=hint, **options)

        # Fail loudly rather than report the speed of a wrong answer.
        torch.testing.assert_close(mine(src), theirs(src), atol=1e-4, rtol=1e-4)
        if not backward:
            fns = {"ours": lambda: mine(src)}
            if reduce == "sum" and order == "random":
                torch.testing.assert_close(mine(src, deterministic=True), theirs(src),
                                           atol=1e-4, rtol=1e-4)
                fns["ours deterministic"] = lambda: mine(src, deterministic=True)
            if reduce == "sum":
                fns["ours no bounds check"] = lambda: mine(src, check_bounds=False)
                fns[name] = lambda: src.new_zeros(nodes, features).scatter_add_(0, expanded, src)
                fns["index_add_"] = lambda: src.new_zeros(nodes, features).index_add_(0, index, src)
                fns[SUITE_READ] = src.sum
            else:
                fns[name] = lambda: src.new_zeros(nodes, features).scatter_reduce_(
                    0, expanded, src, torch_reduce, include_self=False)
            if reduce == "max":
                values, _ = op.scatter_max(src, index, 0, None, nodes, index_sorted=hint)
                torch.testing.assert_close(values, theirs(src), atol=1e-4, rtol=1e-4)
                fns["ours scatter_max values+arg"] = lambda: op.scatter_max(
                    src, index, 0, None, nodes, index_sorted=hint)
            return fns
        leaf = src.detach().clone().requires_grad_()
        grad = torch.randn(nodes, features, device=device)
        got = torch.autograd.grad(mine(leaf), leaf, grad)[0]
        want = torch.autograd.grad(theirs(leaf), leaf, grad)[0]
        if reduce == "max":
            # A tied maximum (2M random floats give a few) takes the whole gradient at its
            # first position here, as in torch_scatter; scatter_reduce splits it evenly.
            # Compare where the maximum of (node, feature) is attained once.
            is_max = src == theirs(src)[index]
            hits = src.new_zeros(nodes, features).index_add_(0, index, is_max.to(src.dtype))
            once = hits[index] <= 1
            got, want = got[once], want[once]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        return {"ours": lambda: torch.autograd.grad(mine(leaf), leaf, grad),
                name: lambda: torch.autograd.grad(theirs(leaf), leaf, grad)}
    return build


if __name__ == "__main__":
    sys.exit(main())
