"""Python surface of the scatter op: ``scatter`` and ``scatter_sum/mean/max/min`` (the
functions of PyTorch Geometric's torch_scatter, same arguments and results), and the
``Scatter`` nn.Module, over the dispatcher ops

    torch.ops.scatter.reduce(src, index, dim, dim_size, reduce, index_sorted, deterministic,
                             check_bounds, compute_arg) -> (out, aux)
    torch.ops.scatter.reduce_(out, src, index, dim, reduce, ...) -> aux   (into out, in place)
    torch.ops.scatter.sum(src, index, dim, dim_size) -> out   (reduce's sum, default options)
    torch.ops.scatter.check_errors(device_of) -> ()

``aux`` is the arg position for max/min (out's shape, int64; empty unless ``compute_arg`` or
src/out require grad: the CUDA route without arg is a single 32-bit atomic per element),
the element counts for mean
(int64, ``[Bc, dim_size, Kc]``: the index viewed as [before dim, dim, after dim], size 1
where it is broadcast) and an empty tensor for sum. Autograd is C++ (scatter.cpp); this
module adds the fake kernels torch.compile and opcheck need.

Semantics (those of torch_scatter):
- ``index`` is broadcast against ``src``: a 1-D index lies along ``dim``; missing trailing
  dimensions and sizes of 1 repeat. It must be int64.
- ``dim_size`` defaults to ``index.max() + 1``: finding it costs a host sync. Pass it (the
  number of nodes) in loops.
- ``out`` is accumulated into, in place, and returned: sum adds, max/min compare with out's
  values (out's value wins ties), mean is ``(out + sum) / max(count, 1)``.
- Empty groups: 0 for every reduction; max/min give arg = ``src.size(dim)`` there (and
  where out's own value stayed the extreme).
- Ties in max/min go to the first position along ``dim``, on CPU and CUDA alike.
- Integer means round down (floor), as torch_scatter's.

Options: ``index_sorted`` (None: unknown; True: a promise that index is non-decreasing
along dim, which takes the CUDA segment route; False: don't look), ``deterministic`` (CUDA
sum/mean without atomics; CPU is always deterministic; torch's deterministic mode turns it
on too), ``check_bounds`` (default True; False skips the index check: out-of-range entries
are then ignored, never written). On CUDA with a given ``dim_size`` the check runs on the
device without a host sync and a bad index raises at the next scatter call on that device,
or at ``check_errors()``; with ``dim_size`` inferred it raises at once.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

import jit_loader

jit_loader.load_library(__file__)

LIB = torch.library.Library("scatter", "FRAGMENT")

REDUCTIONS = ("sum", "mean", "max", "min")


def _dims(src: Tensor, index: Tensor, dim: int):
    """B, K, Bc, Kc of the op's [B, E, K] view (torch_scatter's index broadcasting)."""
    nd = src.dim()
    torch._check(nd >= 1, lambda: "scatter: src must have at least one dimension, got a 0-D tensor")
    torch._check(-nd <= dim < nd,
                 lambda: f"scatter: dim must be in [{-nd}, {nd - 1}] for src of shape "
                         f"{list(src.shape)}, got {dim}")
    torch._check(index.dtype == torch.long,
                 lambda: f"scatter: index must be an int64 (torch.long) tensor, got {index.dtype}")
    d = dim % nd
    shape = list(index.shape)
    if len(shape) == 1:
        shape = [1] * d + shape
    shape += [1] * (nd - len(shape))
    before, after = shape[:d], shape[d + 1:]
    B = K = 1
    for s in src.shape[:d]:
        B *= s
    for s in src.shape[d + 1:]:
        K *= s
    count_b = 1 if all(s == 1 for s in before) else B
    count_k = 1 if all(s == 1 for s in after) else K
    return d, B, K, count_b, count_k


def _aux(src: Tensor, out_shape, reduce: str, d: int, count_b: int, count_k: int, n,
         with_arg: bool):
    if reduce in ("max", "min") and with_arg:
        return src.new_empty(out_shape, dtype=torch.long)
    if reduce == "mean":
        return src.new_empty((count_b, n, count_k), dtype=torch.long)
    return src.new_empty((0,), dtype=torch.long)


@torch.library.register_fake("scatter::reduce", lib=LIB)
def _reduce_fake(src, index, dim=-1, dim_size=None, reduce="sum", index_sorted=None,
                 deterministic=False, check_bounds=True, compute_arg=True):
    # Shapes only; dim_size=None makes the output size data-dependent (an unbacked size).
    jit_loader.check_same_device("scatter", src=src, index=index)
    torch._check(reduce in REDUCTIONS or reduce == "add",
                 lambda: f"scatter: reduce must be one of {REDUCTIONS}, got {reduce!r}")
    d, _, _, count_b, count_k = _dims(src, index, dim)
    n = dim_size if dim_size is not None else torch.library.get_ctx().new_dynamic_size()
    out_shape = list(src.shape)
    out_shape[d] = n
    return src.new_empty(out_shape), _aux(src, out_shape, reduce, d, count_b, count_k, n,
                                          compute_arg)


@torch.library.register_fake("scatter::sum", lib=LIB)
def _sum_fake(src, index, dim=-1, dim_size=None):
    return _reduce_fake(src, index, dim, dim_size, "sum")[0]


@torch.library.register_fake("scatter::reduce_", lib=LIB)
def _reduce_into_fake(out, src, index, dim=-1, reduce="sum", index_sorted=None,
                      deterministic=False, check_bounds=True, compute_arg=True):
    # out is written in place (declared by the schema's alias annotation); only aux is new.
    jit_loader.check_same_device("scatter", src=src, index=index, out=out)
    d, _, _, count_b, count_k = _dims(src, index, dim)
    return _aux(src, list(out.shape), reduce, d, count_b, count_k, out.shape[d], compute_arg)


@torch.library.register_fake("scatter::check_errors", lib=LIB)
def _check_errors_fake(device_of):
    return None


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum", *,
            index_sorted: Optional[bool] = None, deterministic: bool = False,
            check_bounds: bool = True) -> Tensor:
    """Reduce ``src`` into ``out[..., index[i], ...]`` along ``dim``; differentiable.

    The twin of ``torch_scatter.scatter``: returns the values only, for every ``reduce``
    (use :func:`scatter_max` / :func:`scatter_min` for the arg positions too)."""
    if (reduce == "sum" and out is None and index_sorted is None and not deterministic
            and check_bounds):
        return _SUM(src, index, dim, dim_size)  # the common call: four arguments, one result
    return _scatter(src, index, dim, out, dim_size, reduce, index_sorted, deterministic,
                    check_bounds, False)[0]


# Resolved once per build (the loader runs this file again for every build): through the
# packet, each call would resolve the overload from its nine arguments in Python, which
# costs more than the op itself on a small graph (experiments/RESULTS.md, call-overhead).
# An OpOverload outlives a reload, so functions handed out earlier call the newest build.
# Each is called through the loader's fast entry (jit_loader.fast_op).
_REDUCE = jit_loader.fast_op(torch.ops.scatter.reduce.default)
_REDUCE_INTO = jit_loader.fast_op(torch.ops.scatter.reduce_.default)
_SUM = jit_loader.fast_op(torch.ops.scatter.sum.default)


def _scatter(src, index, dim, out, dim_size, reduce, index_sorted, deterministic, check_bounds,
             compute_arg=True) -> Tuple[Tensor, Tensor]:
    if out is None:
        return _REDUCE(src, index, dim, dim_size, reduce, index_sorted, deterministic,
                       check_bounds, compute_arg)
    aux = _REDUCE_INTO(out, src, index, dim, reduce, index_sorted, deterministic, check_bounds,
                       compute_arg)
    return out, aux


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, **options) -> Tensor:
    return scatter(src, index, dim, out, dim_size, "sum", **options)


scatter_add = scatter_sum


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None, **options) -> Tensor:
    return scatter(src, index, dim, out, dim_size, "mean", **options)


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, **options) -> Tuple[Tensor, Tensor]:
    """``(out, arg)``: arg is the position along ``dim`` of each maximum, ``src.size(dim)``
    for empty groups (and where a given out's own value stayed the maximum)."""
    return _scatter(src, index, dim, out, dim_size, "max", options.get("index_sorted"),
                    options.get("deterministic", False), options.get("check_bounds", True))


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, **options) -> Tuple[Tensor, Tensor]:
    """``(out, arg)`` as :func:`scatter_max`, for the minimum."""
    return _scatter(src, index, dim, out, dim_size, "min", options.get("index_sorted"),
                    options.get("deterministic", False), options.get("check_bounds", True))


def check_errors(device="cuda") -> None:
    """Waits for ``device`` and raises an index error that a CUDA call recorded without a
    host sync (see the module docstring). A no-op on CPU, where errors raise at once."""
    torch.ops.scatter.check_errors(torch.empty(0, device=device))


class Scatter(torch.nn.Module):
    """Aggregation layer: ``Scatter("mean")(messages, index, dim_size)``."""

    def __init__(self, reduce: str = "sum", dim: int = 0, **options):
        super().__init__()
        if reduce not in REDUCTIONS:
            raise ValueError(f"Scatter: reduce must be one of {REDUCTIONS}, got {reduce!r}")
        self.reduce, self.dim, self.options = reduce, dim, options

    def forward(self, src: Tensor, index: Tensor, dim_size: Optional[int] = None) -> Tensor:
        return scatter(src, index, self.dim, None, dim_size, self.reduce, **self.options)

    def extra_repr(self) -> str:
        return f"reduce={self.reduce!r}, dim={self.dim}"
