"""An op's schema as ``new --schema`` takes it: ``"NAME(Tensor x, Tensor weight, float eps)
-> Tensor"``, parsed into the arguments every generated file is written from.

Kept apart from the fields the templates take (jit_tools/tools/scaffold_schema.py), which
every kind and ABI derive from the same parsed schema. The subset is what a scaffold
can generate consistently: Tensor, float, int and bool arguments (scalars may have a
default), the first argument a Tensor, one Tensor result.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass

from jit_tools.errors import JitLoaderError


class SchemaError(JitLoaderError, ValueError):
    """The schema cannot be scaffolded; the message names the part and why."""


# schema type -> (C++ parameter type, Python annotation)
SCALAR_TYPES = {"float": ("double", "float"), "int": ("int64_t", "int"), "bool": ("bool", "bool")}

# Names the generated code uses for itself (locals, the backward's incoming gradient).
RESERVED_ARGS = frozenset({"grad", "scale", "result", "n", "i", "begin", "end", "acc", "ctx",
                           "op", "inputs", "output", "stream", "guard", "m", "self", "torch", "y", "out",
                           "at", "c10", "std", "reference", "device", "dtype", "shape",
                           "acc_scale", "grad_i", "grad_c", "grad_p"})

_HEAD = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*\((?P<args>.*)\)\s*->\s*(?P<ret>.+?)\s*\Z", re.S)
_ARG = re.compile(r"\s*(?P<type>[A-Za-z_][\w?\[\]]*)\s+(?P<name>[A-Za-z_]\w*)"
                  r"\s*(?:=\s*(?P<default>\S.*?))?\s*\Z")

MULTI_OUTPUT_HINT = ("the scaffold generates one Tensor result; for several results copy the "
                     "bundled LLTM (ops/lltm: forward returns four tensors, backward five)")


@dataclass(frozen=True)
class Argument:
    name: str
    type: str                 # "Tensor", "float", "int" or "bool"
    default: str | None = None  # the schema's literal, e.g. "1e-06" or "True"

    @property
    def is_tensor(self) -> bool:
        return self.type == "Tensor"

    @property
    def cpp_type(self) -> str:
        return "const at::Tensor&" if self.is_tensor else SCALAR_TYPES[self.type][0]

    @property
    def py_type(self) -> str:
        return "torch.Tensor" if self.is_tensor else SCALAR_TYPES[self.type][1]

    @property
    def py_default(self) -> str | None:
        """The default as Python source (``true`` and ``false`` of a schema too)."""
        if self.default is None:
            return None
        return {"true": "True", "false": "False"}.get(self.default, self.default)


@dataclass(frozen=True)
class Schema:
    name: str
    arguments: tuple[Argument, ...]

    @property
    def tensors(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.is_tensor)

    @property
    def scalars(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if not a.is_tensor)

    def declaration(self, with_defaults: bool = True) -> str:
        """``Tensor x, Tensor weight, float eps=1e-06`` (a schema's argument list)."""
        # The dispatcher spells a bool default True or False (true would be refused).
        return ", ".join(f"{a.type} {a.name}" + (f"={a.py_default}" if with_defaults and a.default else "")
                         for a in self.arguments)


def _check_default(arg: Argument) -> None:
    text = arg.py_default
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    expected = {"float": (int, float), "int": (int,), "bool": (bool,)}[arg.type]
    if value is None or type(value) not in expected or (arg.type != "bool" and isinstance(value, bool)):
        article = "an" if arg.type == "int" else "a"
        raise SchemaError(f"argument {arg.name!r}: default {arg.default!r} is not {article} {arg.type} "
                          "literal")


def parse_schema(text: str, op_name: str | None = None) -> Schema:
    """Parse ``"NAME(Tensor x, Tensor weight, float eps=1e-06) -> Tensor"``; raise
    :class:`SchemaError` naming what cannot be scaffolded. ``op_name``, when given, must be
    the schema's NAME."""
    m = _HEAD.match(text or "")
    if not m:
        raise SchemaError(f"schema {text!r} is not of the form "
                          "\"NAME(Tensor x, Tensor weight, float eps) -> Tensor\"")
    name, ret = m.group("name"), m.group("ret")
    if op_name is not None and name != op_name:
        raise SchemaError(f"schema names the op {name!r} but the op is {op_name!r}: "
                          f"write \"{op_name}({m.group('args')}) -> {ret}\"")
    if ret != "Tensor":
        raise SchemaError(f"schema returns {ret!r}: {MULTI_OUTPUT_HINT}")
    arguments = []
    body = m.group("args").strip()
    for part in (body.split(",") if body else []):
        am = _ARG.match(part)
        if not am:
            raise SchemaError(f"argument {part.strip()!r} is not of the form \"TYPE name\" "
                              "or \"TYPE name=DEFAULT\"")
        arg = Argument(am.group("name"), am.group("type"), am.group("default"))
        if arg.type not in ("Tensor", *SCALAR_TYPES):
            raise SchemaError(f"argument {arg.name!r} has type {arg.type!r}: the scaffold takes "
                              "Tensor, float, int and bool (edit the generated schema for others)")
        if arg.is_tensor and arg.default is not None:
            raise SchemaError(f"argument {arg.name!r}: a Tensor argument takes no default")
        if arg.default is not None:
            _check_default(arg)
        if keyword.iskeyword(arg.name) or arg.name in RESERVED_ARGS or arg.name == name:
            raise SchemaError(f"argument {arg.name!r}: the name is taken in the generated code "
                              "(a keyword, the op's name, or one of "
                              f"{', '.join(sorted(RESERVED_ARGS))}); choose another")
        if any(a.name == arg.name for a in arguments):
            raise SchemaError(f"argument {arg.name!r} appears twice")
        if arguments and arguments[-1].default is not None and arg.default is None:
            raise SchemaError(f"argument {arg.name!r} has no default but follows one that has")
        arguments.append(arg)
    if not arguments or not arguments[0].is_tensor:
        raise SchemaError("the first argument must be a Tensor (it sets the device, dtype and "
                          f"shape of the result), got {body!r}")
    names = {a.name for a in arguments}
    for a in arguments:
        for suffix in ("_c", "_p", "_i", "_grad"):
            if a.name.endswith(suffix) and a.name[: -len(suffix)] in names:
                raise SchemaError(f"argument {a.name!r}: the generated code names its own "
                                  f"variables <argument>{suffix}; choose another name")
    return Schema(name, tuple(arguments))
