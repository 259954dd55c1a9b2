"""The standard checks of an op as one pytest class to subclass, in the manner of
torchvision's ``RoIOpTester``, and the dtypes, devices and layouts op tests share (as
pytorch_scatter's ``testing.py``). It ships with the package, so a test file beside an op
folder anywhere imports it as it imports ``torch.testing``::

    from jit_tools.tools.testing import OpTester

    class TestMyOp(OpTester):
        op_dir = Path(__file__).resolve().parent   # or op_name = "my_op", the folder under ops/

        def test_something_of_my_op(self, op, device): ...

On every device of ``devices`` (CPU, and CUDA where a GPU is visible), for each case the
op's ``reference.check_cases(device)`` declares (its samples, tolerances and surface
function; empty inputs are cases too):

* ``test_check``: ``jit_loader.check`` of the case: the reference on fresh random inputs
  (values and input gradients), gradcheck in float64, opcheck of every dispatcher op it
  calls forward and backward, ``torch.compile(fullgraph=True)`` against eager;
* ``test_strided_inputs``: the case's tensors transposed, every other element, and at a
  storage offset give the values and gradients of their contiguous copies (bit for bit on
  the CPU; on a GPU within the case's tolerances, as atomic sums may add in any order), and
  end as those end (unchanged, an ``out`` argument written alike);
* ``test_bad_arguments_raise_one_line``: every dispatcher op a case of non-empty tensors
  calls, forward and backward, through its fast entry: ``None`` or a number where a tensor
  belongs, a string where a number does, each rule of the op's ``<op>_checks.h`` broken in
  turn (where it declares rules), a tensor on another device, an integer tensor where a
  floating one belongs: one line naming the op and the argument, or (integers) a result.

A subclass adds the tests of the op's own behaviour; they take the same ``op`` and
``device`` fixtures.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path

import pytest
import torch

import jit_loader
from jit_tools import _torch_private
from jit_tools.tools import bad_inputs
from jit_tools.tools.check import check_case

FLOATING_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
LAYOUTS = ("transposed", "every_other", "storage_offset")


def default_devices() -> tuple:
    """CPU everywhere, CUDA marked ``cuda`` and skipped where no GPU is visible. (Made when
    asked: under --strict-markers, naming the mark needs the project to register it.)"""
    return ("cpu", pytest.param("cuda", marks=[
        pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]))


def relayout(t, layout: str):
    """The same values in another memory layout (anything but a tensor as it is): the last
    two dimensions transposed in memory, every other element of a buffer twice as long, or
    one element into a buffer (which breaks 16-byte alignment). A leaf requiring grad stays
    one."""
    if not isinstance(t, torch.Tensor):
        return t
    x = t.detach()
    if layout == "transposed" and x.dim() >= 2:
        x = x.mT.contiguous().mT
    elif layout == "every_other" and x.dim() >= 1:
        wide = torch.empty(*x.shape[:-1], 2 * x.shape[-1], device=x.device, dtype=x.dtype)
        x = wide[..., ::2].copy_(x)
    elif layout == "storage_offset":
        x = torch.empty(x.numel() + 1, device=x.device, dtype=x.dtype)[1:].view(x.shape).copy_(x)
    else:
        x = x.clone()
    return x.requires_grad_(t.requires_grad)


def surface_call(op, spec: dict):
    """The case's ``fn`` as ``check_case`` calls it: a function, an ``autograd.Function``'s
    ``apply``, an ``nn.Module`` made with no arguments; with the case's keywords."""
    fn = getattr(op, spec["fn"])
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        fn = fn()
    elif isinstance(fn, type) and issubclass(fn, torch.autograd.Function):
        fn = fn.apply
    return functools.partial(fn, **(spec.get("keywords") or {}))


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in _torch_private.tree_leaves(out) if isinstance(t, torch.Tensor)]


def outputs_and_grads(fn, inputs, cotangents=None, layout=None):
    """``fn(*inputs)``'s tensors and the gradients of its inputs that require grad for
    ``cotangents`` (random ones where None; relaid out as ``layout``), and the cotangents."""
    out = _tensors(fn(*inputs))
    differentiable = [t for t in out if t.requires_grad]
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    if cotangents is None:
        cotangents = [torch.randn_like(t) for t in differentiable]
    grads = []
    if differentiable and wrt:
        given = [relayout(c, layout) if layout else c for c in cotangents]
        grads = list(torch.autograd.grad(differentiable, wrt, given, allow_unused=True))
    return [t.detach() for t in out], grads, cotangents


def custom_calls(namespaces, fn, inputs) -> list[tuple]:
    """(overload, arguments) of the first call of each op of ``namespaces`` that
    ``fn(*inputs)`` makes, forward and (for a random output gradient) backward."""
    seen: dict = {}

    class Record(_torch_private.dispatch_mode_base()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace in namespaces and func not in seen:
                seen[func] = tuple(args)
            return func(*args, **(kwargs or {}))

    with Record():
        outputs_and_grads(fn, inputs)
    assert seen, f"{fn} called no op of {namespaces}"
    return list(seen.items())


def assert_one_line_naming(error: BaseException, namespace: str, argument: str) -> None:
    """One line, the op first (``<namespace>.<op>: `` or ``<namespace>: ``), the argument."""
    text = str(error)
    assert "\n" not in text and text.startswith(namespace) and argument in text, text


def _same(got: list, want: list, what: str, tolerances=None) -> None:
    """Bit for bit (NaN where NaN), or with ``tolerances`` ({dtype: {atol, rtol}}) within
    the dtype's: a GPU's atomic sums may add in another order on every call."""
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), f"{what} {i}"
        if g is None:
            continue
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what} {i}: {g.dtype} {list(g.shape)}"
        if tolerances is not None and g.is_floating_point():
            torch.testing.assert_close(g, w, **tolerances.get(g.dtype, {}), equal_nan=True,
                                       msg=lambda m: f"{what} {i}: {m}")
        else:
            assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(), w.nan_to_num()) \
                if g.is_floating_point() else torch.equal(g, w), f"{what} {i}"


class OpTester:
    op_name: str | None = None      # the op folder under the repository's ops/
    op_dir: Path | str | None = None  # or the op folder itself, anywhere
    devices: tuple | None = None      # default_devices() unless given, e.g. ("cpu",)

    @classmethod
    def _folder(cls):
        return cls.op_dir if cls.op_dir is not None else cls.op_name

    @classmethod
    @functools.cache
    def reference(cls):
        """The op's reference.py (imported without building anything)."""
        if cls.op_dir is None:
            return importlib.import_module(f"ops.{cls.op_name}.reference")
        path = Path(cls.op_dir) / "reference.py"
        spec = importlib.util.spec_from_file_location(f"_reference_of_{Path(cls.op_dir).name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def pytest_generate_tests(self, metafunc):
        if "device" in metafunc.fixturenames:
            metafunc.parametrize("device", self.devices or default_devices())
        if "case" in metafunc.fixturenames:
            # The case names are the same on every device; each test makes fresh inputs.
            cases = self.reference().check_cases("cpu")
            if metafunc.function.__name__ == "test_bad_arguments_raise_one_line":
                # Breaking a rule takes values (fewer dimensions keeps one element).
                cases = {name: spec for name, spec in cases.items()
                         if all(a.numel() for a in spec["inputs"] if isinstance(a, torch.Tensor))}
            metafunc.parametrize("case", list(cases), ids=str)

    @pytest.fixture(scope="class")
    @classmethod
    def op(cls):
        return jit_loader.load(cls._folder())

    def case_inputs(self, device, case) -> tuple:
        spec = self.reference().check_cases(device)[case]
        return spec, list(spec["inputs"])

    def test_check(self, op, device, case):
        result = check_case(op, self.reference(), case, device, verbose=False)
        assert result, result.table()

    def test_strided_inputs(self, op, device, case):
        spec, inputs = self.case_inputs(device, case)
        fn = surface_call(op, spec)
        contiguous = [relayout(a, "contiguous") for a in inputs]
        want, want_grads, cotangents = outputs_and_grads(fn, contiguous)
        tolerances = None
        if torch.device(device).type != "cpu":
            tolerances = spec.get("tolerances") or getattr(self.reference(), "TOLERANCES", {})
        for layout in LAYOUTS:
            relaid = [relayout(a, layout) for a in inputs]
            got, grads, _ = outputs_and_grads(fn, relaid, cotangents, layout)
            _same(got, want, f"{layout}: output", tolerances)
            _same(grads, want_grads, f"{layout}: gradient of input", tolerances)
            _same([a.detach() for a in relaid if isinstance(a, torch.Tensor)],
                  [a.detach() for a in contiguous if isinstance(a, torch.Tensor)],
                  f"{layout}: input afterwards", tolerances)

    def test_bad_arguments_raise_one_line(self, op, device, case):
        spec, inputs = self.case_inputs(device, case)
        inputs = [a.detach().float().requires_grad_(a.requires_grad)
                  if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in inputs]
        rules_file = Path(op.path) / f"{op.name}_checks.h"
        rules = jit_loader.op_rules(rules_file) if rules_file.is_file() else None
        for overload, args in custom_calls(op.namespaces, surface_call(op, spec), inputs):
            call = jit_loader.fast_op(overload)
            op_name = overload._schema.name.replace("::", ".")
            names = [a.name for a in overload._schema.arguments]
            group = overload._schema.name.split("::", 1)[1]
            cases = bad_inputs.not_tensors(call, op_name, args)
            if rules is not None and group in rules.groups:
                cases += bad_inputs.from_rules(rules, group, op_name, names[:len(args)], args)
                assert len(cases) >= len(rules.groups[group]), (group, [c.label for c in cases])
            for bad in cases:
                with pytest.raises(bad.error) as info:
                    call(*bad.args)
                assert str(info.value) == bad.message, bad.label
            self._wrong_kinds_of_tensor(call, overload, names, args, device)

    @staticmethod
    def _wrong_kinds_of_tensor(call, overload, names, args, device) -> None:
        """An integer tensor where a floating one belongs works or raises one line naming
        the op and the argument; a tensor on another device than the others (meta on the
        CPU, the CPU on a GPU) raises one."""
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        other = "meta" if torch.device(device).type == "cpu" else "cpu"
        for i in tensors:
            changed = list(args)
            if args[i].is_floating_point():
                changed[i] = args[i].to(torch.int64)
                try:
                    call(*changed)
                except (RuntimeError, TypeError, ValueError) as e:
                    assert_one_line_naming(e, overload.namespace, names[i])
            if len(tensors) > 1 and args[i].numel() > 0:
                changed[i] = args[i].to(other)
                with pytest.raises(RuntimeError) as info:
                    call(*changed)
                assert_one_line_naming(info.value, overload.namespace, names[i])
