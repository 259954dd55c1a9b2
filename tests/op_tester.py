"""One tester for every op, in the manner of torchvision's RoIOpTester: ``jit_loader.check``
(the reference comparison, gradcheck in float64, opcheck, torch.compile) over each case the
op's ``reference.py`` declares in ``check_cases(device)``, on every device; and the bad
arguments every op must refuse in one line (``test_bad_arguments_raise_one_line``).

An op's test module subclasses :class:`OpTester` with the op's folder name; the tests of
the op's own behaviour stay beside it in that module.
"""

from __future__ import annotations

import functools
import importlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import jit_loader
from jit_tools.tools import bad_inputs
from jit_tools.tools.check import check_case


def dispatched(op, fn, inputs) -> tuple:
    """(overload, arguments) of the first op of ``op``'s namespaces that ``fn(*inputs)``
    calls: the dispatcher op behind a surface function, with what it is given."""
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not seen and func.namespace in op.namespaces:
                seen.append((func, tuple(args)))
            return func(*args, **(kwargs or {}))

    with Record():
        fn(*inputs)
    assert seen, f"{fn} called no op of {op.namespaces}"
    return seen[0]


def surface_call(op, spec: dict):
    """The case's ``fn`` as check_case calls it: a function, an ``autograd.Function``'s
    ``apply``, an ``nn.Module`` made with no arguments; with the case's keywords."""
    fn = getattr(op, spec["fn"])
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        fn = fn()
    elif isinstance(fn, type) and issubclass(fn, torch.autograd.Function):
        fn = fn.apply
    return functools.partial(fn, **(spec.get("keywords") or {}))


def assert_one_line_naming(error: BaseException, namespace: str, argument: str) -> None:
    """One line, the op first (``<namespace>.<op>: `` or ``<namespace>: ``), the argument."""
    text = str(error)
    assert "\n" not in text and text.startswith(namespace) and argument in text, text


class OpTester:
    op_name: str  # the op folder under ops/

    @classmethod
    def reference(cls):
        return importlib.import_module(f"ops.{cls.op_name}.reference")

    def pytest_generate_tests(self, metafunc):
        if "case" in metafunc.fixturenames:
            # The case names are the same on every device; each test makes fresh inputs.
            metafunc.parametrize("case", list(self.reference().check_cases("cpu")), ids=str)

    @pytest.fixture(scope="class")
    @classmethod
    def op(cls):
        return jit_loader.load(cls.op_name)

    def test_check(self, op, device, case):
        result = check_case(op, self.reference(), case, device, verbose=False)
        assert result, result.table()

    def test_bad_arguments_raise_one_line(self, op, device, case):
        """The op behind the case's surface function, through its fast entry: ``None`` or a
        number where a tensor belongs, a string where a number does, each a TypeError line
        naming the op, the argument and the value; an integer tensor where a floating one
        belongs either works or raises one line naming the op and the argument; a tensor on
        another device than the others (meta on the CPU, the CPU on a GPU) raises one."""
        spec = self.reference().check_cases(device)[case]
        inputs = [a.detach().float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                  for a in spec["inputs"]]
        overload, args = dispatched(op, surface_call(op, spec), inputs)
        call = jit_loader.fast_op(overload)
        op_name = overload._schema.name.replace("::", ".")
        for bad in bad_inputs.not_tensors(call, op_name, args):
            with pytest.raises(bad.error) as info:
                call(*bad.args)
            assert str(info.value) == bad.message, bad.label
        names = [a.name for a in overload._schema.arguments]
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
