"""The calls ``python -m jit_loader sanitize OP`` and ``profile OP`` make: each case of the
op's ``reference.check_cases`` (what ``jit_loader.check_op`` runs), in each of its dtypes,
as declared and in variants that keep the inputs valid but take other paths through the
kernels:

* ``noncontiguous``: every tensor strided (every other element of a larger buffer);
* ``offset``: every tensor one element past an aligned start (vector loads must not assume
  alignment);
* ``empty`` and ``one``: the leading dimension cut to 0 and to 1, in the first tensor and in
  every tensor whose leading dimension matches it (one batch, one set of edges).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Sequence

import torch

from jit_tools.tools import check, fresh_call

VARIANTS = ("declared", "noncontiguous", "offset", "empty", "one")

# The argument whose leading dimension the empty and one-element variants cut, where it is
# not the first tensor: roi_align's regions name batch entries of its feature map, so the
# regions are cut, not the map.
CUT_ARGUMENT = {("detection", "roi_align"): 1}


def reference_of(op_dir: Path):
    """The op's reference module (tests and notebooks import it; it builds nothing)."""
    reference = check.reference_module(types.SimpleNamespace(path=op_dir, name=op_dir.name))
    if reference is None or not callable(getattr(reference, "check_cases", None)):
        raise ValueError(f"{op_dir / 'reference.py'} is missing or declares no check_cases(device)")
    return reference


def _cast(value, dtype: torch.dtype):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(dtype).requires_grad_(value.requires_grad)
    return value


def _restrided(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in a non-contiguous layout, or at an offset start."""
    if t.dim() == 0 or t.numel() == 0:
        return t
    if how == "noncontiguous":
        base = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
        out = base[..., ::2]
    else:
        out = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)
    with torch.no_grad():
        out.copy_(t)
    return out.requires_grad_(t.requires_grad)


def _cut(args: list, index: int, length: int) -> list | None:
    """The args with the leading dimension of ``args[index]`` and of every tensor of the
    same leading size cut to ``length``; None when there is no such tensor."""
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() > 0]
    if not tensors:
        return None
    first = index if index in tensors else tensors[0]
    size = args[first].shape[0]
    if size <= length:
        return None
    out = list(args)
    for i in tensors:
        if args[i].shape[0] == size:
            out[i] = args[i].detach()[:length].clone().requires_grad_(args[i].requires_grad)
    return out


def variant(args: Sequence, name: str, cut_argument: int = 0) -> list | None:
    """``args`` as the variant ``name`` (VARIANTS) has them; None where it does not apply."""
    args = list(args)
    if name == "declared":
        return args
    if name in ("noncontiguous", "offset"):
        return [_restrided(a, name) if isinstance(a, torch.Tensor) else a for a in args]
    if name in ("empty", "one"):
        return _cut(args, cut_argument, 0 if name == "empty" else 1)
    raise ValueError(f"unknown variant {name!r}; variants are {', '.join(VARIANTS)}")


def op_calls(op_dir: Path, device: str = "cuda", variants: Sequence[str] = ("declared",),
             dtypes: Sequence[torch.dtype] | None = None, backward: bool | None = None,
             cases: Sequence[str] | None = None) -> list[fresh_call.Call]:
    """The calls of the op's check cases on ``device``: each case (or those named in
    ``cases``) in each of its dtypes (or those of ``dtypes`` it declares), in each variant.
    ``backward`` None: a call runs its backward where an input requires grad."""
    op_dir = Path(op_dir).resolve()
    declared = reference_of(op_dir).check_cases(device)
    unknown = sorted(set(cases or ()) - set(declared))
    if unknown:
        raise ValueError(f"op {op_dir.name!r} has no case {', '.join(map(repr, unknown))}; "
                         f"its cases: {', '.join(map(repr, declared))}")
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; variants are {', '.join(VARIANTS)}")
    calls = []
    for case_name, case in declared.items():
        if cases and case_name not in cases:
            continue
        case_dtypes = [d for d in case.get("dtypes") or (torch.float32,) if dtypes is None or d in dtypes]
        for dtype in case_dtypes:
            args = [_cast(a, dtype) for a in case["inputs"]]
            for v in variants:
                made = variant(args, v, CUT_ARGUMENT.get((op_dir.name, case["fn"]), 0))
                if made is None:
                    continue
                kwargs = dict(case.get("keywords") or {})
                calls.append(fresh_call.Call(
                    label=f"{op_dir.name}: {case_name} [{str(dtype).removeprefix('torch.')}, {v}]",
                    target={"kind": "surface", "op": str(op_dir), "name": case["fn"]},
                    args=tuple(made), kwargs=kwargs,
                    backward=fresh_call.wants_backward(made, kwargs, backward)))
    return calls
