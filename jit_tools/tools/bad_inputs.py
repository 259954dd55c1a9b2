"""Bad arguments for an op's tests, each with the one-line error it must raise: from the
rules the op declares in ``<op>_checks.h`` (``from_rules``: every rule broken in turn) and
from the kinds of its arguments (``not_tensors``: ``None`` or a number where a tensor
belongs, a string where a number does).

``from_rules`` takes the expected message from the rules themselves (jit_tools/fake.py), so
a test that calls the real kernel with the same arguments proves that the C++ checks, which
expand the same rules, say the same. The op tester (jit_tools/tools/testing.py) uses it.
"""

from __future__ import annotations

import dataclasses

import torch

from jit_tools import _torch_private
from jit_tools.fake import OpRules


@dataclasses.dataclass
class BadInput:
    label: str          # what was broken, e.g. "same_dtype(weight, x)" or "x=None"
    args: tuple         # the call's arguments, one of them bad
    message: str        # the whole error expected, one line
    error: type = RuntimeError


def _grow(t: torch.Tensor, dim: int) -> torch.Tensor:
    """t with one more entry along dim (a 0-D t becomes 1-D)."""
    if t.dim() == 0:
        return t.reshape(1).repeat(2)
    shape = list(t.shape)
    shape[dim] = 1
    return torch.cat([t, torch.zeros(shape, dtype=t.dtype, device=t.device)], dim)


def _fewer_dims(t: torch.Tensor, d: int) -> torch.Tensor:
    """t with d - 1 dimensions (d >= 1)."""
    return t.reshape(-1)[0] if d == 1 else t.reshape(*t.shape[:d - 2], -1)


def _other_device(device: torch.device) -> str:
    # On the CPU a meta tensor (which sends the call to the fake kernel, whose text is the
    # same); on a GPU the CPU.
    return "meta" if device.type == "cpu" else "cpu"


def _break(kind: str, rule_args: tuple, values: dict) -> tuple[str, object] | None:
    """(argument name, its bad value) that breaks the rule, or None."""
    name = rule_args[0]
    v = values[name]
    if kind == "floating":
        return name, v.to(torch.int64)
    if kind == "dim":
        return name, v.unsqueeze(0)
    if kind == "dim_at_least":
        return (name, _fewer_dims(v, rule_args[1])) if rule_args[1] >= 1 else None
    if kind in ("size", "size_as"):
        return name, _grow(v, rule_args[1])
    if kind == "same_device":
        return name, v.to(_other_device(v.device))
    if kind == "same_dtype":
        return name, v.to(torch.float32 if v.dtype == torch.float64 else torch.float64)
    if kind == "same_shape":
        return name, _grow(v, 0)
    if kind == "nonnegative":
        return name, type(v)(-1)
    if kind == "positive":
        return name, type(v)(0)
    return None


def from_rules(rules: OpRules, group: str, op: str, names: list[str], args: tuple) -> list[BadInput]:
    """``args`` (positional, named ``names``; valid) with each rule of ``group`` broken in
    turn, and the message the rules give for the broken arguments: the first rule they
    break, which is the one meant unless breaking it breaks an earlier one too."""
    cases = []
    values = dict(zip(names, args))
    for kind, rule_args in rules.groups[group]:
        broken = _break(kind, rule_args, values)
        if broken is None:
            continue
        name, bad = broken
        changed = {**values, name: bad}
        try:
            rules.check(group, op, **changed)
        except RuntimeError as e:
            message = str(e)
        else:
            continue  # nothing fails (a rule other rules make unreachable)
        label = f"{kind}({', '.join(map(str, rule_args))})"
        cases.append(BadInput(label, tuple(changed[n] for n in names), message))
    return cases


# A schema argument type -> how the fast entry names it (jit_loader_fastcall.cpp).
_KINDS = {"Tensor": "a Tensor", "int": "an int", "SymInt": "an int", "float": "a float",
          "bool": "a bool", "str": "a str"}


def not_tensors(overload, op: str, args: tuple) -> list[BadInput]:
    """For every tensor argument of ``overload`` (an op's fast entry, ``jit_loader.fast_op``),
    ``None`` and a number in its place; for every number, a string: each a ``TypeError`` line
    naming the op, the argument and the value, as the fast entry raises it. Empty where the
    op has no fast entry (``JIT_LOADER_FASTCALL=0``, the piece not built): torch's own text
    comes then."""
    if _torch_private.fast_call_of(overload) is None:
        return []
    cases = []
    for i, arg in enumerate(overload._schema.arguments[:len(args)]):
        kind = _KINDS.get(str(arg.type))
        if kind is None or kind == "a str":  # a str argument takes any string
            continue
        bad = [(None, "None"), (3, "int 3")] if kind == "a Tensor" else [("three", "str 'three'")]
        for obj, shown in bad:
            changed = list(args)
            changed[i] = obj
            cases.append(BadInput(f"{arg.name}={shown}", tuple(changed),
                                  f"{op}: {arg.name} must be {kind}, got {shown}", TypeError))
    return cases
