"""The rows of ``jit_loader.check``'s table (:mod:`jit_tools.tools.check`): the reference
comparison in each dtype, float64 gradcheck with the worst Jacobian difference, opcheck
of every dispatcher op the function calls (found by running it under a dispatch mode) and
``torch.compile(fullgraph=True)`` against eager."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Mapping

import torch

from jit_tools import _torch_private

# dtype -> (atol, rtol) for comparisons with the reference and with compiled code:
# torch.testing.assert_close's defaults.
TOLERANCES = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-7, 1e-7),
}

GRADCHECK = {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3}

# Past this many function evaluations the Jacobian error column is left empty
# (gradcheck itself still runs).
JACOBIAN_EVALUATIONS = 4096

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")

# Namespaces of PyTorch's own operators; calls into any other one are custom ops.
TORCH_NAMESPACES = frozenset({
    "aten", "prim", "prims", "profiler", "debugprims", "rngprims", "inductor", "higher_order",
    "c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor", "quantized",
    "_quantized", "mkldnn", "onednn", "fbgemm", "_inductor_test", "streams",
})

PASS, FAIL, NA = "pass", "FAIL", "n/a"

@dataclasses.dataclass
class CheckRow:
    """One line of the table. ``error``/``allowed`` are the worst element's deviation and
    the tolerance at that element (the check passes when error <= allowed everywhere)."""
    check: str
    dtype: str
    status: str
    error: float | None = None
    allowed: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL

def op_name(op) -> str:
    if isinstance(op, _torch_private.OpOverloadPacket):
        return op._qualified_op_name
    return op.name() if op._overloadname == "default" else f"{op.name()}.{op._overloadname}"

def _is_float(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()

def _copy(args: tuple, dtype: torch.dtype | None = None, requires_grad: bool | None = None) -> tuple:
    """Fresh leaf copies of the tensor arguments, floating ones cast to ``dtype``; their
    ``requires_grad`` is the original's unless given."""
    out = []
    for x in args:
        if isinstance(x, torch.Tensor):
            grad = x.requires_grad if requires_grad is None else requires_grad
            y = x.detach().clone()
            if y.is_floating_point():
                if dtype is not None:
                    y = y.to(dtype)
                y.requires_grad_(grad)
            x = y
        out.append(x)
    return tuple(out)

def _for_dtype(call: Callable, dtype: torch.dtype) -> Callable:
    if isinstance(call, torch.nn.Module):
        return copy.deepcopy(call).to(dtype)
    return call

def _sample_dtype(args: tuple) -> torch.dtype | None:
    return next((x.dtype for x in args if _is_float(x)), None)

def _for_sample(call: Callable, args: tuple) -> Callable:
    """``call`` with a module's parameters in the floating dtype of the sample inputs."""
    dtype = _sample_dtype(args)
    return _for_dtype(call, dtype) if dtype is not None else call

def _tensors(out) -> list[torch.Tensor]:
    return [t for t in _torch_private.tree_leaves(out) if isinstance(t, torch.Tensor)]

def _differentiable(args: tuple) -> list[torch.Tensor]:
    return [x for x in args if _is_float(x) and x.requires_grad]

def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else ""
    line = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return line if len(line) <= 160 else line[:157] + "..."

@dataclasses.dataclass
class Tolerances:
    atol: float | None
    rtol: float | None
    table: Mapping[torch.dtype, Mapping[str, float]] | None

    def of(self, dtype: torch.dtype) -> tuple[float, float]:
        """(atol, rtol) of ``dtype``: the overrides, else the table's, else TOLERANCES."""
        default_atol, default_rtol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
        if self.table is not None and dtype in self.table:
            default_atol, default_rtol = self.table[dtype]["atol"], self.table[dtype]["rtol"]
        return (default_atol if self.atol is None else self.atol,
                default_rtol if self.rtol is None else self.rtol)

@dataclasses.dataclass
class _Comparison:
    ok: bool
    error: float | None = None
    allowed: float | None = None
    detail: str = ""

def _compare(actual: list, expected: list, atol: float, rtol: float) -> _Comparison:
    """Element-wise ``|a - e| <= atol + rtol |e|`` over lists of tensors (None is zero),
    reporting the element closest to (or furthest past) its bound."""
    if len(actual) != len(expected):
        return _Comparison(False, detail=f"{len(actual)} tensors, expected {len(expected)}")
    worst = _Comparison(True, 0.0, atol)
    worst_ratio = -1.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a is None and e is None:
            continue
        a = torch.zeros_like(e) if a is None else a
        e = torch.zeros_like(a) if e is None else e
        if a.shape != e.shape:
            return _Comparison(False, detail=f"output {i} has shape {list(a.shape)}, "
                                             f"expected {list(e.shape)}")
        if a.numel() == 0:
            continue
        if not (a.is_floating_point() or e.is_floating_point()):
            atol_i, rtol_i = 0.0, 0.0  # integers (indices, counts) agree exactly
        else:
            atol_i, rtol_i = atol, rtol
        a = a.detach().to(torch.float64)
        e = e.detach().to(torch.float64)
        both_nan = a.isnan() & e.isnan()
        diff = torch.where(both_nan, 0.0, (a - e).abs()).nan_to_num(nan=float("inf"))
        allowed = atol_i + rtol_i * e.abs().nan_to_num(nan=0.0, posinf=0.0)
        ratio = torch.where(diff == 0, 0.0, diff / allowed)  # 0 / 0 where the bound is 0
        k = int(ratio.reshape(-1).argmax())
        if float(ratio.reshape(-1)[k]) > worst_ratio:
            worst_ratio = float(ratio.reshape(-1)[k])
            worst.error = float(diff.reshape(-1)[k])
            worst.allowed = float(allowed.reshape(-1)[k])
            if worst_ratio > 1:
                worst.detail = f"tensor {i}, element {k}" if len(actual) > 1 else f"element {k}"
    worst.ok = worst_ratio <= 1
    return worst

def _ratio(cmp: _Comparison) -> float:
    if not cmp.ok and cmp.error is None:
        return float("inf")
    return (cmp.error or 0.0) / (cmp.allowed or 1.0)

def _cotangents(out) -> list[torch.Tensor]:
    return [torch.randn_like(t) for t in _tensors(out) if t.is_floating_point()]

def _like(cotangents: list[torch.Tensor], out) -> list[torch.Tensor]:
    """The same output gradients in the dtypes of ``out`` (a reference's, maybe float64)."""
    outs = [t for t in _tensors(out) if t.is_floating_point()]
    return [c.to(t.dtype) for c, t in zip(cotangents, outs)]

def _input_grads(out, inputs: list[torch.Tensor], cotangents: list[torch.Tensor]) -> list:
    outs = [t for t in _tensors(out) if t.is_floating_point()]
    return list(torch.autograd.grad(outs, inputs, cotangents, allow_unused=True))

def reference_rows(call, reference, sample, dtypes, tolerances: Tolerances,
                    reference_dtype) -> list[CheckRow]:
    if reference is None:
        return [CheckRow("reference", "", NA, detail="no reference given")]
    rows = []
    for dtype in dtypes:
        tol = tolerances.of(dtype)
        name = str(dtype).removeprefix("torch.")
        args = _copy(sample, dtype)
        ref_args = _copy(args, reference_dtype)
        try:
            out = _for_dtype(call, dtype)(*args)
            expected = _for_dtype(reference, dtype)(*ref_args)
        except Exception as err:  # noqa: BLE001 - reported in the table
            rows.append(CheckRow("reference", name, FAIL, detail=_first_line(err)))
            continue
        cmp = _compare(_tensors(out), _tensors(expected), *tol)
        rows.append(CheckRow("reference", name, PASS if cmp.ok else FAIL, cmp.error, cmp.allowed,
                             cmp.detail))
        inputs, ref_inputs = _differentiable(args), _differentiable(ref_args)
        if not inputs:
            continue
        try:
            cotangents = _cotangents(out)
            grads = _input_grads(out, inputs, cotangents)
            ref_grads = _input_grads(expected, ref_inputs, _like(cotangents, expected))
        except Exception as err:  # noqa: BLE001
            rows.append(CheckRow("reference grad", name, FAIL, detail=_first_line(err)))
            continue
        cmp = _compare(grads, ref_grads, *tol)
        rows.append(CheckRow("reference grad", name, PASS if cmp.ok else FAIL, cmp.error,
                             cmp.allowed, cmp.detail))
    return rows

def gradcheck_row(call, sample) -> CheckRow:
    from torch.autograd.gradcheck import GradcheckError

    args = _copy(sample, torch.float64)
    if not _differentiable(args):
        return CheckRow("gradcheck", "float64", NA, detail="no floating input requires grad")
    fn = _for_dtype(call, torch.float64)
    status, detail = PASS, ""
    try:
        torch.autograd.gradcheck(fn, args, **GRADCHECK)
    except GradcheckError as err:
        status, detail = FAIL, str(err).strip().splitlines()[0].rstrip(",")
    except Exception as err:  # noqa: BLE001
        status, detail = FAIL, _first_line(err)
    try:
        cmp = _jacobian_error(fn, args)
    except Exception:  # noqa: BLE001 - the verdict above already covers the failure
        cmp = None
    error, allowed = (cmp.error, cmp.allowed) if cmp is not None else (None, None)
    return CheckRow("gradcheck", "float64", status, error, allowed, detail)

def _jacobian_error(fn, args: tuple) -> _Comparison | None:
    """Analytical (autograd) against numerical (central differences) Jacobian."""
    eps, atol, rtol = GRADCHECK["eps"], GRADCHECK["atol"], GRADCHECK["rtol"]
    base = [x.detach().clone().contiguous() if isinstance(x, torch.Tensor) else x for x in args]
    wrt = [i for i, x in enumerate(args) if _is_float(x) and x.requires_grad]

    def evaluate(xs) -> torch.Tensor:
        with torch.no_grad():
            outs = [t.reshape(-1) for t in _tensors(fn(*xs)) if t.is_floating_point()]
        return torch.cat(outs).to(torch.float64)

    out0 = evaluate(base)
    n_in = sum(base[i].numel() for i in wrt)
    if 2 * n_in + out0.numel() > JACOBIAN_EVALUATIONS:
        return None
    numerical = torch.zeros(out0.numel(), n_in, dtype=torch.float64)
    column = 0
    for i in wrt:
        flat = base[i].view(-1)
        for k in range(flat.numel()):
            value = flat[k].item()
            flat[k] = value + eps
            plus = evaluate(base)
            flat[k] = value - eps
            minus = evaluate(base)
            flat[k] = value
            numerical[:, column] = ((plus - minus) / (2 * eps)).cpu()
            column += 1
    leaves = list(base)
    for i in wrt:
        leaves[i] = base[i].clone().requires_grad_(True)
    out = torch.cat([t.reshape(-1) for t in _tensors(fn(*leaves)) if t.is_floating_point()])
    analytical = torch.zeros_like(numerical)
    for r in range(out.numel()):
        if not out.requires_grad:
            break
        grads = torch.autograd.grad(out[r], [leaves[i] for i in wrt], retain_graph=True,
                                    allow_unused=True)
        analytical[r] = torch.cat([
            (g if g is not None else torch.zeros_like(leaves[i])).reshape(-1).to(torch.float64).cpu()
            for g, i in zip(grads, wrt)])
    return _compare([analytical], [numerical], atol, rtol)

@dataclasses.dataclass
class _OpCall:
    op: Any
    args: tuple
    kwargs: dict
    differentiated: bool  # some call ran with grad mode on and an input requiring grad

class _OpRecorder(_torch_private.dispatch_mode_base()):
    """Records the first call of each custom dispatcher op, with copies of its arguments.

    The mode sits below autograd: an op with an autograd kernel shows up as called from
    that kernel (grad mode off); one without, as called by its caller."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, _OpCall] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace not in TORCH_NAMESPACES:
            differentiated = torch.is_grad_enabled() and any(
                _is_float(t) and t.requires_grad for t in _torch_private.tree_leaves((args, kwargs)))
            call = self.calls.get(func.name())
            if call is None:
                args_copy, kwargs_copy = _torch_private.tree_map_only(
                    torch.Tensor, lambda t: t.detach().clone(), (args, kwargs))
                self.calls[func.name()] = _OpCall(func, args_copy, kwargs_copy, differentiated)
            else:
                call.differentiated |= differentiated
        return func(*args, **kwargs)

def _dispatcher_calls(call, sample) -> tuple[dict[str, _OpCall], Exception | None]:
    """The custom ops ``call`` runs forward and backward, with the error that stopped it
    (the calls made before it are kept)."""
    args = _copy(sample)
    call = _for_sample(call, args)
    recorder = _OpRecorder()
    try:
        with recorder:
            out = call(*args)
            outs = [t for t in _tensors(out) if t.is_floating_point() and t.requires_grad]
            if outs:
                torch.autograd.backward(outs, [torch.randn_like(t) for t in outs])
    except Exception as err:  # noqa: BLE001 - the other checks report the failure itself
        return recorder.calls, err
    return recorder.calls, None

def _as_overloads(op) -> list:
    ops = op if isinstance(op, (list, tuple)) else [op]
    out = []
    for item in ops:
        if isinstance(item, _torch_private.OpOverloadPacket):
            names = item.overloads()
            if len(names) != 1:
                raise ValueError(f"check: {item._qualified_op_name} has overloads {names}; "
                                 "pass one, e.g. torch.ops.ns.op.default")
            item = getattr(item, names[0])
        if not isinstance(item, _torch_private.OpOverload):
            raise TypeError(f"check: op= takes dispatcher ops (torch.ops.ns.op), got {item!r}")
        out.append(item)
    return out

def _has_autograd_kernel(op) -> bool:
    return any(_torch_private.has_kernel(op.name(), key)
               for key in ("Autograd", "AutogradCPU", "AutogradCUDA", "CompositeImplicitAutograd"))

def opcheck_rows(call, sample, op) -> list[CheckRow]:
    calls, run_error = _dispatcher_calls(call, sample)
    if op is not None:
        selected = []
        for overload in _as_overloads(op):
            recorded = calls.get(overload.name())
            if recorded is None or recorded.op != overload:
                differentiated = any(x.requires_grad for x in _differentiable(sample))
                recorded = _OpCall(overload, _copy(sample), {}, differentiated)
            selected.append(recorded)
    else:
        selected = list(calls.values())
    if not selected:
        detail = ("fn calls no custom dispatcher op" if run_error is None
                  else f"fn failed: {_first_line(run_error)}")
        return [CheckRow("opcheck", "", NA, detail=detail)]
    return [_opcheck_row(recorded) for recorded in selected]

def _opcheck_row(call: _OpCall) -> CheckRow:
    """opcheck's tests on one recorded call. An op with an autograd kernel gets inputs
    that require grad (its backward is traced too). One without is checked for a
    misplaced autograd registration only if it was differentiated through the
    dispatcher; otherwise it runs inside a backward or an autograd.Function, whose
    wrapper does the differentiating."""
    op, kwargs = call.op, call.kwargs
    has_autograd = _has_autograd_kernel(op)
    with_grad = has_autograd or call.differentiated
    args = _copy(call.args, requires_grad=with_grad)
    utils = [util for util in OPCHECK_UTILS
             if util != "test_autograd_registration" or (with_grad and _differentiable(args))]
    results = torch.library.opcheck(op, args, kwargs, test_utils=utils, raise_exception=False)
    failures = {util: res for util, res in results.items() if res != "SUCCESS"}
    name = f"opcheck {op_name(op)}"
    if failures:
        util, err = next(iter(failures.items()))
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return CheckRow(name, "", FAIL, detail=f"{util}: {_first_line(err)}{more}")
    ran = ", ".join(util.removeprefix("test_") for util in results)
    note = "" if with_grad else " (called without grad: differentiated by its caller)"
    return CheckRow(name, "", PASS, detail=ran + note)

def _fresh(call: Callable) -> Callable:
    """A wrapper with its own code object, so each check compiles anew instead of
    piling recompilations onto one cache entry (and silently falling back to eager)."""
    def run(*args, **kwargs):
        return call(*args, **kwargs)
    run.__code__ = run.__code__.replace()
    return run

def compile_row(call, sample, backend: str, tolerances: Tolerances) -> CheckRow:
    name = f"compile ({backend})"
    dtypes = {x.dtype for x in sample if _is_float(x)}
    dtype = max(dtypes, key=lambda d: TOLERANCES.get(d, (0, 0))[1]) if dtypes else torch.float32
    tol = tolerances.of(dtype)
    label = str(dtype).removeprefix("torch.") if dtypes else ""
    eager_args, compiled_args = _copy(sample), _copy(sample)
    call = _for_sample(call, sample)
    try:
        compiled = torch.compile(_fresh(call), fullgraph=True, backend=backend)
        expected = call(*eager_args)
        out = compiled(*compiled_args)
    except Exception as err:  # noqa: BLE001
        return CheckRow(name, label, FAIL, detail=_first_line(err))
    cmp = _compare(_tensors(out), _tensors(expected), *tol)
    inputs = _differentiable(compiled_args)
    if cmp.ok and inputs:
        try:
            cotangents = _cotangents(expected)
            grads = _input_grads(out, inputs, cotangents)
            eager_grads = _input_grads(expected, _differentiable(eager_args), cotangents)
        except Exception as err:  # noqa: BLE001
            return CheckRow(name, label, FAIL, detail=f"backward: {_first_line(err)}")
        grad_cmp = _compare(grads, eager_grads, *tol)
        if _ratio(grad_cmp) >= _ratio(cmp):
            cmp = dataclasses.replace(grad_cmp, detail=f"gradients: {grad_cmp.detail}".rstrip(": "))
        if cmp.ok:
            cmp.detail = "outputs and gradients"
    return CheckRow(name, label, PASS if cmp.ok else FAIL, cmp.error, cmp.allowed, cmp.detail)
