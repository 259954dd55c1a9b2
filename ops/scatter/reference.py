"""Readable references for the scatter op: a loop over elements (the definition), and the
same semantics built from ``torch.Tensor.scatter_reduce``. Importing this module builds
nothing.
"""

from __future__ import annotations

import itertools
from typing import Optional, Tuple

import torch
from torch import Tensor

# Agreement with the float64 reference: sums of 16-bit inputs are accumulated in float
# and rounded once; max/min are exact in every dtype.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=1.6e-2),
    torch.int32: dict(atol=0, rtol=0),
    torch.int64: dict(atol=0, rtol=0),
}


def broadcast_index(index: Tensor, src: Tensor, dim: int) -> Tensor:
    """torch_scatter's rule: a 1-D index lies along dim, then trailing dims are added and
    sizes of 1 repeat."""
    dim = dim % src.dim()
    if index.dim() == 1:
        index = index.view([1] * dim + [-1])
    while index.dim() < src.dim():
        index = index.unsqueeze(-1)
    return index.expand(src.shape)


def output_of(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
              dim_size: Optional[int]) -> Tuple[int, Tensor, list]:
    """(dim made non-negative, the index broadcast to src, the output's shape): dim_size
    is out's size along dim where out is given, else index.max() + 1 unless given."""
    dim = dim % src.dim()
    idx = broadcast_index(index, src, dim)
    if dim_size is None:
        dim_size = out.size(dim) if out is not None else (int(idx.max()) + 1 if idx.numel() else 0)
    shape = list(src.shape)
    shape[dim] = dim_size
    return dim, idx, shape


def scatter_loop(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None, reduce: str = "sum") -> Tuple[Tensor, Tensor]:
    """The definition, one element at a time: returns (out, arg); arg is src.size(dim) for
    empty groups and where out's own value stays the extreme (max/min only)."""
    dim, idx, shape = output_of(src, index, dim, out, dim_size)
    result = out.clone() if out is not None else torch.zeros(shape, dtype=src.dtype)
    arg = torch.full(shape, src.size(dim), dtype=torch.long)
    count = torch.zeros(shape, dtype=torch.long)
    for pos in itertools.product(*map(range, src.shape)):
        target = list(pos)
        target[dim] = int(idx[pos])
        target = tuple(target)
        v = src[pos]
        if reduce in ("sum", "mean"):
            result[target] += v
        else:
            take = (v > result[target]) if reduce == "max" else (v < result[target])
            if (out is None and arg[target] == src.size(dim)) or take:
                result[target] = v
                arg[target] = pos[dim]
        count[target] += 1
    if reduce == "mean":
        c = count.clamp_min(1).to(result.dtype)
        result = torch.div(result, c, rounding_mode="floor") if not result.is_floating_point() \
            else result / c
    return result, arg


def scatter_torch(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                  dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """The same values from torch's own ops: scatter_add_ for sum, scatter_reduce for the rest
    (empty groups of max/min set to 0 where out was not given)."""
    dim, idx, shape = output_of(src, index, dim, out, dim_size)
    if reduce in ("sum", "mean"):
        total = (out.clone() if out is not None else src.new_zeros(shape)).scatter_add_(dim, idx, src)
        if reduce == "sum":
            return total
        count = torch.zeros(shape, dtype=torch.long, device=src.device).scatter_add_(
            dim, idx, torch.ones_like(idx)).clamp_min(1).to(src.dtype)
        return total / count if src.is_floating_point() else torch.div(total, count, rounding_mode="floor")
    amax = {"max": "amax", "min": "amin"}[reduce]
    if out is not None:
        return out.clone().scatter_reduce_(dim, idx, src, amax, include_self=True)
    base = src.new_zeros(shape)
    hit = torch.zeros(shape, dtype=torch.bool, device=src.device).scatter_(dim, idx, True)
    return base.scatter_reduce(dim, idx, src, amax, include_self=False).masked_fill(~hit, 0)


def example_inputs(device="cpu", dtype=torch.float32, edges: int = 1000, features: int = 16,
                   nodes: int = 100, sorted: bool = False, requires_grad: bool = True):
    """A graph-style problem: messages [edges, features] and their target nodes [edges]."""
    index = torch.randint(0, nodes, (edges,), device=device)
    if sorted:
        index = index.sort().values
    if dtype.is_floating_point:
        src = torch.randn(edges, features, device=device).to(dtype)
        src.requires_grad_(requires_grad)
    else:
        src = torch.randint(-1000, 1000, (edges, features), device=device, dtype=dtype)
    return src, index, nodes


def check_cases(device="cpu") -> dict[str, dict]:
    """What every check of the op runs (``jit_loader.check_op``; the op tester makes a
    test of each): each reduction against ``scatter_torch`` in float64 on fresh random
    inputs, random and sorted index, values and gradients, within TOLERANCES; the size
    taken from the index (a data-dependent shape); no messages at all. Each case is
    jit_loader.check's arguments, ``fn`` naming the surface function. (An ``out`` written in
    place is tests/test_scatter.py's: these checks differentiate every floating input.)"""
    cases = {}
    for reduce, sorted_ in itertools.product(("sum", "mean", "max", "min"), (False, True)):
        # 240 edges into 24 nodes: every node gets about ten messages. gradcheck's finite
        # differences evaluate the op twice per input element, so the default 1000 x 16
        # sample (32,000 calls, each a parallel region on the CPU) takes minutes on a
        # many-core host with a test worker per core; the value and gradient comparison at
        # larger sizes is tests/test_scatter.py's.
        src, index, nodes = example_inputs(device, torch.float64, edges=240, features=6, nodes=24,
                                           sorted=sorted_)
        cases[f"{reduce} {'sorted' if sorted_ else 'random'}"] = dict(
            fn="scatter", inputs=(src, index, 0, None, nodes, reduce), reference=scatter_torch,
            keywords=dict(index_sorted=True) if sorted_ else None, dtypes=(torch.float64,))
    src, index, _ = example_inputs(device, torch.float64, edges=60, features=3, nodes=9)
    cases["sum size from index"] = dict(fn="scatter", inputs=(src, index, 0), reference=scatter_torch,
                                        dtypes=(torch.float64,))
    cases["sum no messages"] = dict(fn="scatter", reference=scatter_torch, dtypes=(torch.float64,),
                                    inputs=(src[:0], index[:0], 0, None, 9, "sum"))
    return cases
