"""Tests shared by the elementwise activation ops (sigmoid, gelu).

An op's test module subclasses :class:`PointwiseTester` with its :class:`PointwiseSpec` as ``SPEC``;
pytest collects the tests below in that class, with the standard checks of every op
(:class:`jit_tools.tools.testing.OpTester`). What differs between the ops (the reference, what backward
saves, the argument names in error messages) lives in the spec; tests of one op's own
behaviour (saturation, its eager composite) stay in its class.

Values are compared with the op's float64 reference within the dtype's tolerance
(``spec.tolerances``: 16-bit results are computed in float and rounded once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from jit_tools.tools.testing import FLOATING_DTYPES, OpTester

DTYPES = list(FLOATING_DTYPES)
SIZES = [0, 1, 3, 1023, 2**20 + 7]
SHAPES = [(), (4, 0, 3), (7, 33), (2, 3, 5, 7)]


@dataclass(frozen=True)
class PointwiseSpec:
    name: str                      # op folder, dispatcher namespace, error-message prefix
    function: str                  # differentiable function of the surface, e.g. "gelu"
    autograd_function: str         # its autograd.Function, e.g. "GELUFunction"
    module: str                    # its nn.Module, e.g. "GELU"
    reference: Callable            # forward, float64
    backward_reference: Callable   # (grad, saved) -> dx, float64
    eager: Callable                # the same forward in PyTorch ops, in the input's dtype
    saves_output: bool             # backward takes the output y (sigmoid) or the input x (gelu)
    tolerances: dict
    input_scale: float

    @property
    def saved_name(self) -> str:
        return "y" if self.saves_output else "x"

    def saved(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The tensor backward takes, given the input and the output."""
        return y if self.saves_output else x

    def forward_op(self):
        return getattr(torch.ops, self.name).forward

    def backward_op(self):
        return getattr(torch.ops, self.name).backward


def random_input(spec, shape, device, dtype, scale=None):
    scale = spec.input_scale if scale is None else scale
    return (torch.randn(shape, device=device) * scale).to(dtype)


def assert_matches(spec, got, want, dtype):
    assert got.dtype == dtype
    assert got.shape == want.shape
    assert got.is_contiguous()
    torch.testing.assert_close(got.double(), want.double(), **spec.tolerances[dtype])


def layouts(spec, device, dtype):
    """Non-contiguous views, and a storage offset that breaks 16-byte alignment."""
    base = random_input(spec, (64, 48), device, dtype)
    return {
        "transposed": base.t(),
        "step_slice": base[:, ::3],
        "storage_offset": base.flatten()[1:],
        "expanded": base[:1].expand(5, 48),
        "channels_last": random_input(spec, (2, 3, 5, 7), device, dtype).to(
            memory_format=torch.channels_last),
    }


class PointwiseTester(OpTester):
    SPEC: PointwiseSpec  # and op_name, the op folder

    @pytest.fixture
    def spec(self):
        return self.SPEC

    # ----------------------------------------------------------------------------- values

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("size", SIZES)
    def test_forward_matches_reference(self, op, spec, device, dtype, size):
        x = random_input(spec, size, device, dtype)
        assert_matches(spec, getattr(op, spec.function)(x), spec.reference(x.double()), dtype)

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("shape", SHAPES, ids=str)
    def test_forward_any_shape(self, op, spec, device, dtype, shape):
        x = random_input(spec, shape, device, dtype)
        assert_matches(spec, getattr(op, spec.function)(x), spec.eager(x), dtype)

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("size", SIZES)
    def test_backward_matches_reference(self, op, spec, device, dtype, size):
        x = random_input(spec, size, device, dtype).requires_grad_()
        grad = random_input(spec, size, device, dtype, scale=1.0)
        y = getattr(op, spec.function)(x)
        y.backward(grad)
        saved = spec.saved(x.detach(), y.detach())
        want = spec.backward_reference(grad.double(), saved.double())
        assert_matches(spec, x.grad, want, dtype)
        assert_matches(spec, spec.backward_op()(grad, saved), want, dtype)

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("layout", ["transposed", "step_slice", "storage_offset", "expanded",
                                        "channels_last"])
    def test_strided_inputs(self, op, spec, device, dtype, layout):
        x = layouts(spec, device, dtype)[layout]
        before = x.clone()
        y = getattr(op, spec.function)(x)
        assert_matches(spec, y, spec.reference(x.double()), dtype)
        assert torch.equal(x, before)
        grad, saved = layouts(spec, device, dtype)[layout], layouts(spec, device, dtype)[layout]
        assert_matches(spec, spec.backward_op()(grad, saved),
                       spec.backward_reference(grad.double(), saved.double()), dtype)

    @pytest.mark.cuda
    def test_indexing_past_2_31_elements(self, op, spec):
        """64-bit indices: elements past 2^31 are computed, and the tail after them too."""
        n = 2**31 + 9
        if torch.cuda.mem_get_info()[0] < 3 * n * 2:
            pytest.skip("needs 13 GB of free GPU memory")
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        y = getattr(op, spec.function)(x)
        for part in (slice(0, 4096), slice(2**31 - 4096, n)):
            assert_matches(spec, y[part], spec.reference(x[part].double()), torch.bfloat16)

    # ------------------------------------------------------------------- autograd surface

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
    def test_module_and_autograd_function(self, op, spec, device, dtype):
        x = random_input(spec, (6, 9), device, dtype).requires_grad_()
        grad = random_input(spec, (6, 9), device, dtype, scale=1.0)
        want_y = spec.reference(x.detach().double())
        # Backward sees the saved tensor as stored, in the dtype.
        saved = spec.saved(x.detach(), want_y.to(dtype))
        want_dx = spec.backward_reference(grad.double(), saved.double())
        for fn in (getattr(op, spec.module)(), getattr(op, spec.autograd_function).apply,
                   getattr(op, spec.function)):
            x.grad = None
            y = fn(x)
            y.backward(grad)
            assert_matches(spec, y.detach(), want_y, dtype)
            assert_matches(spec, x.grad, want_dx, dtype)

    # ------------------------------------------------------------------------ bad inputs

    @pytest.mark.parametrize("dtype, name", [(torch.int64, "Long"), (torch.bool, "Bool"),
                                             (torch.int32, "Int")])
    def test_rejects_non_floating_input(self, op, spec, device, dtype, name):
        x = torch.ones(4, device=device, dtype=dtype)
        with pytest.raises(RuntimeError,
                           match=f"{spec.name}.forward: x must be a floating-point tensor, got {name}"):
            spec.forward_op()(x)
        with pytest.raises(RuntimeError, match=f"{spec.name}.backward: {spec.saved_name} must be a "
                                               f"floating-point tensor, got {name}"):
            spec.backward_op()(x, x)

    def test_backward_rejects_mismatched_grad(self, op, spec, device):
        s, saved = spec.name, spec.saved_name
        x = torch.randn(4, device=device)
        with pytest.raises(RuntimeError,
                           match=rf"{s}.backward: grad has shape \[3\] but {saved} has shape \[4\]"):
            spec.backward_op()(torch.ones(3, device=device), x)
        with pytest.raises(RuntimeError,
                           match=f"{s}.backward: grad has dtype Double but {saved} has dtype Float"):
            spec.backward_op()(torch.ones(4, device=device, dtype=torch.float64), x)

    @pytest.mark.cuda
    def test_backward_rejects_mismatched_devices(self, op, spec):
        x = torch.randn(4, device="cuda")
        message = f"{spec.name}.backward: grad is on cpu but {spec.saved_name} is on cuda:0"
        with pytest.raises(RuntimeError, match=message):
            spec.backward_op()(torch.ones(4), x)

    def test_fake_kernel_rejects_meta_mixed_with_cpu(self, op, spec):
        """One argument on meta dispatches to the fake kernel, which must name the mismatch
        instead of returning an uninitialised tensor."""
        s, saved = spec.name, spec.saved_name
        with pytest.raises(RuntimeError, match=f"{s}.backward: grad is on meta but {saved} is on cpu"):
            spec.backward_op()(torch.ones(4, device="meta"), torch.randn(4))
        with pytest.raises(RuntimeError, match=f"{s}.backward: grad is on cpu but {saved} is on meta"):
            spec.backward_op()(torch.ones(4), torch.randn(4, device="meta"))
