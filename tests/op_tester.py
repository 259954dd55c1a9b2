"""One tester for every op, in the manner of torchvision's RoIOpTester: ``jit_loader.check``
(the reference comparison, gradcheck in float64, opcheck, torch.compile) over each case the
op's ``reference.py`` declares in ``check_cases(device)``, on every device.

An op's test module subclasses :class:`OpTester` with the op's folder name; the tests of
the op's own behaviour stay beside it in that module.
"""

from __future__ import annotations

import importlib

import pytest

import jit_loader
from jit_tools.tools.check import check_case


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
