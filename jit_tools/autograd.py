"""Autograd for an op whose backward is itself an op, declared once in the op's Python
surface (``jit_loader.register_autograd_op``) and served by one of two paths:

* the C++ kernel of ``csrc/jit_loader_autograd.cpp``, registered at the Autograd key:
  no Python runs per call, and a call that needs no grad goes straight below autograd.
  It is a shared piece built once per exact torch build (``process_pieces.autograd_piece``);
* ``torch.library.register_autograd`` with a setup_context and a backward generated
  from the same declaration, where the piece is not there: while it builds in the
  background after an op's first build (the next load or reload after it is built imports
  the surface again, which then registers the C++ kernel: surface.went_without_pieces),
  where it failed to build, for a prebuilt (AOT) op, where no compiler is to run, and with
  ``JIT_LOADER_CPP_AUTOGRAD=0``.

Both compute the same gradients from the same backward op. Either registration belongs to
the surface's ``torch.library.Library``, so the loader withdraws it with the surface's
other registrations when it reloads the op.

The declaration names the backward op's arguments in the forward op's terms::

    "grad", "grad[i]"          the incoming gradient of output 0 / output i
    "result", "result[i]"      output 0 / output i of the forward op
    "<input>"                  a forward argument by its schema name (a tensor is saved
                               for backward, anything else kept as it is)
    "<input>.shape"            its sizes as a list; "<input>.shape[2:]" a slice of them;
                               "<input>.shape[1]" one size

and ``gives`` names the forward input that receives each output of the backward op
(None: dropped); other inputs get no gradient.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass

import torch

from jit_tools import _torch_private
from jit_tools.builder import process_pieces
from jit_tools.state import PREBUILT_NAMESPACES

ENV = "JIT_LOADER_CPP_AUTOGRAD"

_REF = re.compile(r"^(?P<name>\w+)(?:\[(?P<item>\d+)\])?$|"
                  r"^(?P<input>\w+)\.shape(?:\[(?P<dim>-?\d+)\]|\[(?P<start>-?\d*):(?P<stop>-?\d*)\])?$")


@dataclass(frozen=True)
class Ref:
    """One argument of the backward op: ``kind`` grad, output, input, sizes or size;
    ``index`` the output or input; ``start``/``stop`` the dims of sizes (stop None: to
    the end), ``start`` the dim of size."""
    kind: str
    index: int
    start: int = 0
    stop: int | None = None


@dataclass(frozen=True)
class Spec:
    forward: str
    backward: str
    refs: tuple[Ref, ...]
    gives: tuple[int | None, ...]
    num_inputs: int

    def text(self) -> str:
        """The spec as the C++ kernel parses it."""
        lines = [f"forward {self.forward}", f"backward {self.backward}",
                 "gives " + " ".join(str(-1 if g is None else g) for g in self.gives)]
        for r in self.refs:
            if r.kind == "sizes":
                lines.append(f"sizes {r.index} {r.start} {'end' if r.stop is None else r.stop}")
            elif r.kind == "size":
                lines.append(f"size {r.index} {r.start}")
            else:
                lines.append(f"{r.kind} {r.index}")
        return "\n".join(lines) + "\n"


def overload(qualname: str) -> torch._ops.OpOverload:
    """``torch.ops`` overload of ``ns::op`` or ``ns::op.overload``."""
    if "::" not in qualname:
        raise ValueError(f"register_autograd_op: an op is named 'namespace::name', got {qualname!r}")
    ns, rest = qualname.split("::", 1)
    name, _, over = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), name), over or "default")


def _is_tensor(arg) -> bool:
    t = arg.type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def parse(op: str, backward: str, args, gives=None) -> Spec:
    """The declaration checked against both schemas, with every name resolved."""
    fs, bs = overload(op)._schema, overload(backward)._schema
    names = [a.name for a in fs.arguments]
    n_out = len(fs.returns)

    def input_index(name: str, what: str) -> int:
        if name not in names:
            raise ValueError(f"register_autograd_op({op}): {what} names {name!r}, which is not an "
                             f"argument of {op} (its arguments: {', '.join(names)})")
        return names.index(name)

    refs = []
    for text in args:
        m = _REF.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"register_autograd_op({op}): argument {text!r} of {backward} is not "
                             "'grad', 'result', an input name or '<input>.shape[...]'")
        if m.group("input"):
            i = input_index(m.group("input"), f"argument {text!r}")
            if not _is_tensor(fs.arguments[i]):
                raise ValueError(f"register_autograd_op({op}): argument {text!r} takes the shape of "
                                 f"{m.group('input')!r}, which is not a Tensor")
            if m.group("dim") is not None:
                refs.append(Ref("size", i, int(m.group("dim"))))
            else:
                start, stop = m.group("start"), m.group("stop")
                refs.append(Ref("sizes", i, int(start) if start else 0, int(stop) if stop else None))
            continue
        name, item = m.group("name"), int(m.group("item") or 0)
        if name in ("grad", "result"):
            if item >= n_out:
                raise ValueError(f"register_autograd_op({op}): argument {text!r}: {op} has {n_out} outputs")
            refs.append(Ref("grad" if name == "grad" else "output", item))
        else:
            if m.group("item") is not None:
                raise ValueError(f"register_autograd_op({op}): argument {text!r}: only grad and result "
                                 "take an index")
            refs.append(Ref("input", input_index(name, f"argument {text!r}")))
    if len(refs) != len(bs.arguments):
        raise ValueError(f"register_autograd_op({op}): {backward} takes {len(bs.arguments)} arguments "
                         f"({', '.join(a.name for a in bs.arguments)}), got {len(refs)}: {list(args)}")
    if gives is None:
        gives = next(a.name for a in fs.arguments if _is_tensor(a))
    gives = (gives,) if isinstance(gives, str) or gives is None else tuple(gives)
    if len(gives) != len(bs.returns):
        raise ValueError(f"register_autograd_op({op}): {backward} returns {len(bs.returns)} values, "
                         f"gives names {len(gives)}: {gives}")
    resolved = []
    for g in gives:
        if g is None:
            resolved.append(None)
            continue
        i = input_index(g, "gives")
        if not _is_tensor(fs.arguments[i]):
            raise ValueError(f"register_autograd_op({op}): gives names {g!r}, which is not a Tensor")
        resolved.append(i)
    return Spec(op, backward, tuple(refs), tuple(resolved), len(names))


# --- the C++ kernel ------------------------------------------------------------------------

_CPP: dict[str, ctypes.CDLL | None] = {}
_STARTED: set[str] = set()


def cpp_enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def cpp_library() -> ctypes.CDLL | None:
    """The loaded C++ piece, or None where the Python path serves: disabled, failed to
    build, or not built yet (then a background build starts, once per process, unless
    ``JIT_LOADER_SHARED_NOW`` builds it now)."""
    if not cpp_enabled():
        return None
    pieces = process_pieces
    return pieces.process_piece(pieces.autograd_piece, pieces.build_autograd_later, _CPP, _STARTED,
                                _load_cpp, "the C++ autograd piece (using "
                                           "torch.library.register_autograd)")


def _load_cpp(path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    lib.jit_loader_autograd_register.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.jit_loader_autograd_register.restype = ctypes.c_void_p
    lib.jit_loader_autograd_unregister.argtypes = [ctypes.c_void_p]
    return lib


class CppRegistration:
    """One C++ autograd kernel at the dispatcher; ``destroy`` withdraws it (the
    ``torch.library.Library`` that holds it calls that when destroyed)."""

    def __init__(self, lib: ctypes.CDLL, spec: Spec):
        error = ctypes.create_string_buffer(4096)
        self._lib, self.spec = lib, spec
        self._handle = lib.jit_loader_autograd_register(spec.text().encode(), error, len(error))
        if not self._handle:
            message = error.value.decode(errors="replace").split("\nException raised from", 1)[0]
            raise RuntimeError(f"register_autograd_op({spec.forward}): {message}")

    def destroy(self) -> None:
        if self._handle:
            self._lib.jit_loader_autograd_unregister(self._handle)
            self._handle = None


# --- the Python path -----------------------------------------------------------------------


def _python_functions(spec: Spec, backward_op):
    """setup_context and backward for torch.library.register_autograd, doing what the
    C++ kernel does: tensors saved with save_for_backward, everything else on ctx."""
    refs = spec.refs

    def setup_context(ctx, inputs, output):
        outputs = output if isinstance(output, tuple) else (output,)
        tensors, values = [], []
        for r in refs:
            if r.kind == "output":
                tensors.append(outputs[r.index])
            elif r.kind == "input" and isinstance(inputs[r.index], torch.Tensor):
                tensors.append(inputs[r.index])
                values.append(_SAVED)
            elif r.kind == "input":
                values.append(inputs[r.index])
            elif r.kind == "sizes":
                values.append(list(inputs[r.index].shape[r.start:r.stop]))
            elif r.kind == "size":
                values.append(inputs[r.index].shape[r.start])
        ctx.save_for_backward(*tensors)
        ctx.values = values

    def backward(ctx, *grads):
        wanted = [g is not None and ctx.needs_input_grad[g] for g in spec.gives]
        if not any(wanted):
            return (None,) * spec.num_inputs
        tensors, values = iter(ctx.saved_tensors), iter(ctx.values)
        args = []
        for r in refs:
            if r.kind == "grad":
                args.append(grads[r.index])
            elif r.kind == "output":
                args.append(next(tensors))
            else:
                value = next(values)
                args.append(next(tensors) if value is _SAVED else value)
        out = backward_op(*args)
        outs = out if isinstance(out, tuple) else (out,)
        result = [None] * spec.num_inputs
        for g, want, value in zip(spec.gives, wanted, outs):
            if want:
                result[g] = value
        return tuple(result)

    return setup_context, backward


_SAVED = object()  # in ctx.values: this input is a tensor, in ctx.saved_tensors


def register(op: str, backward: str, args, gives=None, *, lib: torch.library.Library) -> str:
    """Register the autograd of ``op`` (see the module docstring); returns the path
    taken, ``"cpp"`` or ``"python"``."""
    spec = parse(op, backward, args, gives)
    namespace = op.split("::", 1)[0]
    cpp = None if namespace in PREBUILT_NAMESPACES else cpp_library()
    if cpp is not None:
        _torch_private.add_registration_handle(lib, CppRegistration(cpp, spec))
        return "cpp"
    setup_context, backward_fn = _python_functions(spec, overload(backward))
    torch.library.register_autograd(op, backward_fn, setup_context=setup_context, lib=lib)
    return "python"
