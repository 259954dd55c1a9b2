"""One-line correctness check of an op, for notebooks and tests.

    import jit_loader, torch
    sig = jit_loader.load("sigmoid")
    jit_loader.check(sig.sigmoid, [(4, 8)], reference=torch.sigmoid)

On fresh random inputs it runs

* reference: the op against ``reference`` in float32 and float64, the outputs and the
  input gradients for one random output gradient (skipped without a reference), within
  a tolerance per dtype; with ``reference_dtype=torch.float64`` the reference runs on the
  same values in float64, so the table is the op's own accuracy;
* gradcheck: ``torch.autograd.gradcheck`` in float64 (the verdict); the error column is
  the worst difference between the analytical and the numerical Jacobian;
* opcheck: ``torch.library.opcheck`` on every dispatcher op the function calls, with
  the arguments it called it with (found by running the function under a dispatch
  mode), or on the op given as ``fn`` or ``op=``; "n/a" for plain Python functions;
* compile: ``torch.compile(fn, fullgraph=True)`` against eager, outputs and gradients;

prints a table and returns a :class:`CheckResult`, truthy when every check that ran
passed. :func:`check_op` runs it over the cases an op's ``reference.py`` declares.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from jit_tools import _torch_private, sources
from jit_tools.tools.check_rows import (FAIL, NA, PASS, CheckRow, Tolerances, compile_row, gradcheck_row,
                                        op_name, opcheck_rows, reference_rows)

class CheckResult:
    """The rows of one :func:`check`; truthy when no check that ran failed."""

    def __init__(self, name: str, rows: list[CheckRow]):
        self.name = name
        self.rows = rows

    def __bool__(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def failed(self) -> list[CheckRow]:
        return [row for row in self.rows if row.status == FAIL]

    def row(self, check: str, dtype: str | None = None) -> CheckRow:
        """The first row whose check name starts with ``check`` (and has ``dtype``)."""
        for row in self.rows:
            if row.check.startswith(check) and dtype in (None, row.dtype):
                return row
        raise KeyError(f"no {check!r} row for dtype {dtype} in the check of {self.name}")

    def summary(self) -> str:
        counts = {status: sum(row.status == status for row in self.rows) for status in (PASS, FAIL, NA)}
        verdict = "PASS" if self else "FAIL"
        return (f"check {self.name}: {verdict} ({counts[PASS]} passed, {counts[FAIL]} failed, "
                f"{counts[NA]} n/a)")

    def table(self) -> str:
        header = ("check", "dtype", "result", "worst err", "allowed", "")
        cells = [header] + [
            (row.check, row.dtype, row.status, _sci(row.error), _sci(row.allowed), row.detail)
            for row in self.rows]
        widths = [max(len(line[i]) for line in cells) for i in range(5)]
        lines = [self.summary()]
        for line in cells:
            text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths))
            lines.append(("  " + text + "  " + line[5]).rstrip())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<CheckResult {self.summary()}>"

def check(fn: Callable | type | Any, inputs: Any, reference: Callable | None = None, *,
          op: Any = None, dtypes: Sequence[torch.dtype] = (torch.float32, torch.float64),
          atol: float | None = None, rtol: float | None = None,
          tolerances: Mapping[torch.dtype, Mapping[str, float]] | None = None,
          reference_dtype: torch.dtype | None = None, gradcheck: bool = True,
          opcheck: bool = True, compile_backend: str | None = "inductor",
          device: str | torch.device | None = None, name: str | None = None,
          seed: int | None = None, verbose: bool = True) -> CheckResult:
    """Check an op in one line; print the table and return a :class:`CheckResult`.

    fn: a function, an ``autograd.Function`` subclass (its ``apply`` is called), an
        ``nn.Module`` or a dispatcher op (``torch.ops.ns.op`` or ``.default``).
    inputs: a tuple of sample arguments (tensors and others, taken as they are), or a
        shape spec: a list of shapes such as ``[(4, 8), (8,)]``, each becoming a fresh random float64
        tensor that requires grad (on ``device``, default CUDA when present).
    reference: the function to compare with (same arguments), e.g. the op's
        ``reference.py`` or its ``torch`` twin.
    op: dispatcher op(s) to run ``opcheck`` on; default: those ``fn`` calls.
    dtypes: the floating dtypes of the reference comparison.
    atol, rtol: override the tolerances of the reference and compile comparisons.
    tolerances: ``{dtype: {"atol": ..., "rtol": ...}}``, the tolerances of the dtypes it
        names (an op's ``TOLERANCES`` table); ``atol``/``rtol`` still override.
    reference_dtype: run the reference on the inputs of each dtype cast to this one (their
        values unchanged), e.g. float64 to compare every dtype with the exact answer.
    compile_backend: backend of the ``torch.compile`` check; None skips it.
    """
    if seed is not None:
        torch.manual_seed(seed)
    call, label, dispatcher_op = _callable(fn)
    sample = _make_inputs(inputs, device if device is not None else _default_device(fn, dispatcher_op))
    rows: list[CheckRow] = []
    tol = Tolerances(atol, rtol, tolerances)
    rows += reference_rows(call, reference, sample, dtypes, tol, reference_dtype)
    if gradcheck:
        rows.append(gradcheck_row(call, sample))
    if opcheck:
        rows += opcheck_rows(call, sample, op if op is not None else dispatcher_op)
    if compile_backend is not None:
        rows.append(compile_row(call, sample, compile_backend, tol))
    result = CheckResult(name or label, rows)
    if verbose:
        print(result.table(), flush=True)
    return result

def _callable(fn) -> tuple[Callable, str, Any]:
    if isinstance(fn, type) and issubclass(fn, torch.autograd.Function):
        return fn.apply, fn.__name__, None
    if isinstance(fn, (_torch_private.OpOverload, _torch_private.OpOverloadPacket)):
        return fn, op_name(fn), fn
    custom = _torch_private.custom_op_overload(fn)
    if custom is not None:
        return fn, op_name(custom), custom
    if isinstance(fn, torch.nn.Module):
        return fn, type(fn).__name__, None
    if callable(fn):
        label = getattr(fn, "_qualname", None) or getattr(fn, "__qualname__", None) or repr(fn)
        return fn, label, None
    raise TypeError(f"check: fn must be a function, an autograd.Function, an nn.Module or a "
                    f"dispatcher op, got {type(fn).__name__}")

def _is_shape(item) -> bool:
    return (isinstance(item, (tuple, list, torch.Size))
            and all(isinstance(d, int) and not isinstance(d, bool) for d in item))

def _make_inputs(inputs, device) -> tuple:
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if _is_shape(inputs) and len(inputs) > 0:
        inputs = [inputs]  # a single shape, e.g. (4, 8)
    elif isinstance(inputs, tuple):
        return inputs  # sample arguments as they are: (x, (17, 25), "half_pixel")
    sample = []
    for item in inputs:
        if _is_shape(item):
            item = torch.randn(tuple(item), dtype=torch.float64, device=device, requires_grad=True)
        sample.append(item)
    return tuple(sample)

def _default_device(fn, dispatcher_op) -> torch.device:
    """Where shape-spec inputs are made: a module's own device, the CPU for a dispatcher
    op that has no CUDA kernel (a CPU-only build), else CUDA when a GPU is visible."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if isinstance(fn, torch.nn.Module):
        for tensor in [*fn.parameters(), *fn.buffers()]:
            return tensor.device
    if dispatcher_op is not None:
        qualname = op_name(dispatcher_op).split(".")[0]
        if not any(_torch_private.has_kernel(qualname, key)
                   for key in ("CUDA", "CompositeImplicitAutograd", "CompositeExplicitAutograd")):
            return torch.device("cpu")
    return torch.device("cuda")

def _sci(value: float | None) -> str:
    return "" if value is None else f"{value:.1e}"

def reference_module(op) -> Any:
    """The ``reference.py`` of a loaded op (bundled or in a folder anywhere), or None."""
    op_dir = Path(op.path)
    path = op_dir / "reference.py"
    if not path.is_file():
        return None
    if op_dir.parent == sources.OPS_DIR.resolve():
        return importlib.import_module(f"ops.{op.name}.reference")
    spec = importlib.util.spec_from_file_location(f"_reference_of_{op.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def check_case(op, reference, case: str, device: str | torch.device, **options) -> CheckResult:
    """:func:`check` of one case of ``reference.check_cases(device)``: a dict of
    :func:`check`'s arguments on fresh inputs, with ``fn`` the name of the surface function
    (an ``nn.Module`` class is instantiated), ``inputs`` its sample arguments and
    ``keywords`` keyword arguments of the op alone (not of the reference); the
    tolerances are the reference's ``TOLERANCES`` unless the case names its own.
    ``options`` override the case's arguments."""
    arguments = dict(reference.check_cases(str(device))[case])
    fn = getattr(op, arguments.pop("fn"))
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        fn = fn()
    keywords = arguments.pop("keywords", None)
    if keywords:
        fn = functools.partial(fn, **keywords)
    arguments.setdefault("tolerances", getattr(reference, "TOLERANCES", None))
    arguments.update(device=device, name=f"{op.name}: {case}", **options)
    return check(fn, arguments.pop("inputs"), **arguments)

def check_op(op, device: str | torch.device | None = None, **options) -> list[CheckResult]:
    """:func:`check_case` of every case the op's ``reference.py`` declares, on ``device``
    (default CUDA when a GPU is visible); one result per case."""
    reference = reference_module(op)
    if reference is None or not callable(getattr(reference, "check_cases", None)):
        raise ValueError(f"check: {Path(op.path) / 'reference.py'} is missing or declares no "
                         "check_cases(device)")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return [check_case(op, reference, case, device, **options)
            for case in reference.check_cases(str(device))]
