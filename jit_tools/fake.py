"""What the fake kernels of every op share: the checks a real kernel makes that need no
data, and an op's argument rules declared once (``op_rules``). A fake kernel runs under torch.compile and opcheck, and is the Meta kernel in eager
mode, where one argument on ``meta`` and the others on the CPU would otherwise give an
uninitialised CPU tensor instead of the real kernel's device error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch


def check_same_device(op: str, **tensors) -> None:
    """Every tensor on the device of the first one, as ``OP_CHECK_SAME_DEVICE`` checks
    it in C++ and with its message: ``"<op>: <name> is on <device> but <first> is on
    <device>"``. ``None`` (an optional tensor left out) is skipped."""
    given = [(name, t) for name, t in tensors.items() if t is not None]
    if not given:
        return
    ref_name, ref = given[0]
    for name, t in given[1:]:
        torch._check(t.device == ref.device,
                     lambda: f"{op}: {name} is on {t.device} but {ref_name} is on {ref.device}")


# ---- an op's argument rules, declared once in <op>_checks.h ----------------------------------

# torch's dtypes as C++ prints them (c10::ScalarType), so a fake kernel's text is the real one's.
_DTYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
    torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble", torch.uint16: "UInt16", torch.uint32: "UInt32",
    torch.uint64: "UInt64",
}
_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _number(v) -> str:
    """A scalar as C++'s ostream prints it (%g, 6 significant digits)."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def _shape(t) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


# kind -> (check, message), each with the argument values and the rule's names; the texts
# are those of ops/common/arg_checks.h.
def _size_at(t, dim):
    return t.shape[dim]


_RULES = {
    "floating": (lambda t: t.dtype in _FLOATING,
                 lambda n, t: f"{n[0]} must be a floating-point tensor, got {dtype_name(t.dtype)}"),
    "dim": (lambda t, d: t.dim() == d,
            lambda n, t, d: f"{n[0]} must be a {d}-D tensor, got {t.dim()}-D with shape {_shape(t)}"),
    "dim_at_least": (lambda t, d: t.dim() >= d,
                     lambda n, t, d: f"{n[0]} must be at least {d}-D, got {t.dim()}-D with shape "
                                     f"{_shape(t)}"),
    "size": (lambda t, dim, size: _size_at(t, dim) == size,
             lambda n, t, dim, size: f"{n[0]}.size({dim}) must be {size}, got {_size_at(t, dim)} "
                                     f"(shape {_shape(t)})"),
    "size_as": (lambda t, dim, ref, ref_dim: _size_at(t, dim) == _size_at(ref, ref_dim),
                lambda n, t, dim, ref, ref_dim: f"{n[0]}.size({dim}) must be {n[2]}.size({ref_dim}) "
                                                f"= {_size_at(ref, ref_dim)}, got {_size_at(t, dim)} "
                                                f"(shape {_shape(t)})"),
    "same_device": (lambda t, ref: t.device == ref.device,
                    lambda n, t, ref: f"{n[0]} is on {t.device} but {n[1]} is on {ref.device}"),
    "same_dtype": (lambda t, ref: t.dtype == ref.dtype,
                   lambda n, t, ref: f"{n[0]} has dtype {dtype_name(t.dtype)} but {n[1]} has dtype "
                                     f"{dtype_name(ref.dtype)}"),
    "same_shape": (lambda t, ref: t.shape == ref.shape,
                   lambda n, t, ref: f"{n[0]} has shape {_shape(t)} but {n[1]} has shape {_shape(ref)}"),
    "nonnegative": (lambda v: v >= 0, lambda n, v: f"{n[0]} must be >= 0, got {_number(v)}"),
    "positive": (lambda v: v > 0, lambda n, v: f"{n[0]} must be > 0, got {_number(v)}"),
}

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)_RULES\(RULE\)((?:[^\n]*\\\n)*[^\n]*)", re.M)
_ITEM = re.compile(r"RULE\(\s*(\w+)\s*((?:,[^,()]+)*)\)|(\w+)_RULES\(RULE\)")


class OpRules:
    """The rule groups of one ``<op>_checks.h`` (ops/common/arg_checks.h says how they are
    written): ``check(group, op, **arguments)`` raises, in a fake kernel, what the C++
    checks that expand the same group raise."""

    def __init__(self, path: Path, groups: dict[str, list[tuple[str, tuple]]]):
        self.path, self.groups = path, groups

    def check(self, group: str, op: str, **arguments) -> None:
        for kind, names in self.groups[group]:
            values = [arguments[n] if isinstance(n, str) else n for n in names]
            ok, message = _RULES[kind]
            torch._check(ok(*values), lambda: f"{op}: {message(names, *values)}")


def _parse(path: Path, prefix: str) -> dict[str, list[tuple[str, tuple]]]:
    text = path.read_text()
    macros = {m.group(1): m.group(2).replace("\\\n", " ") for m in _DEFINE.finditer(text)}
    groups: dict[str, list[tuple[str, tuple]]] = {}

    def expand(macro: str, seen: tuple) -> list:
        if macro not in macros or macro in seen:
            raise ValueError(f"{path}: {macro}_RULES is not defined (or includes itself)")
        rules = []
        for m in _ITEM.finditer(macros[macro]):
            if m.group(3):
                rules += expand(m.group(3), (*seen, macro))
                continue
            kind = m.group(1)
            if kind not in _RULES:
                raise ValueError(f"{path}: RULE({kind}, ...): no such rule; the kinds are "
                                 f"{', '.join(_RULES)} (ops/common/arg_checks.h)")
            args = tuple(a.strip() for a in m.group(2).split(",")[1:])
            rules.append((kind, tuple(int(a) if re.fullmatch(r"-?\d+", a) else a for a in args)))
        return rules

    for macro in macros:
        group = macro[len(prefix) + 1:] if macro.startswith(prefix + "_") else macro
        groups[group.lower()] = expand(macro, ())
    return groups


def op_rules(path: str | os.PathLike) -> OpRules:
    """The argument rules an op declares in ``<op>_checks.h``: ``path`` is that header, or a
    file of the op folder (its Python surface's ``__file__``), whose ``<folder>_checks.h`` is
    read. Group names are lower case, without the op's prefix: ``MY_OP_FORWARD_RULES`` is
    ``"forward"``."""
    path = Path(path)
    if path.suffix != ".h":
        path = path.parent / f"{path.parent.name}_checks.h"
    prefix = path.name.removesuffix("_checks.h").upper()
    return OpRules(path, _parse(path, prefix))
