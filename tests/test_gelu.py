"""The gelu op, specified as tests: the sigmoid approximation x * sigmoid(1.702 x)
forward, and the backward grad * (s + 1.702 x s (1 - s)) from the saved input x, on
every device and floating dtype, for any shape and layout.

The tests it shares with sigmoid are in pointwise_tester.py, and the checks of every op in
jit_tools/tools/testing.py; this module adds gelu's own: agreement with the eager
composite, and saturation.
"""

from __future__ import annotations

import pytest
import torch

from ops.gelu import reference
from pointwise_tester import DTYPES, PointwiseSpec, PointwiseTester, assert_matches, random_input

SPEC = PointwiseSpec(
    name="gelu", function="gelu", autograd_function="GELUFunction", module="GELU",
    reference=reference.gelu_reference, backward_reference=reference.gelu_backward_reference,
    eager=reference.gelu_reference, saves_output=False, tolerances=reference.TOLERANCES,
    input_scale=3.0)


class TestGELU(PointwiseTester):
    op_name = "gelu"
    SPEC = SPEC

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_matches_eager_composite(self, op, device, dtype):
        x = random_input(SPEC, 4099, device, dtype).requires_grad_()
        x_eager = x.detach().clone().requires_grad_()
        grad = random_input(SPEC, 4099, device, dtype, scale=1.0)
        y, y_eager = op.gelu(x), x_eager * torch.sigmoid(1.702 * x_eager)
        y.backward(grad)
        y_eager.backward(grad)
        # In 16-bit the composite rounds after each of its ops; ours rounds once.
        slack = 4 if dtype in (torch.float16, torch.bfloat16) else 1
        tol = {k: v * slack for k, v in SPEC.tolerances[dtype].items()}
        torch.testing.assert_close(y, y_eager, **tol)
        torch.testing.assert_close(x.grad, x_eager.grad, **tol)

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_saturates_without_overflow(self, op, device, dtype):
        """e^-1.702x of a large positive x is never formed, nor inf * 0: finite inputs
        give finite values (x for x >> 0, -0 for x << 0) and gradients (1 and 0), even
        where 1.702 x overflows. At -inf, like the formula, -inf * 0 is NaN."""
        big = torch.finfo(dtype).max
        x = torch.tensor([big, -big, 1e4, -1e4, 100.0, -100.0, 30.0, -30.0, 0.0, -0.0, float("inf")],
                         device=device, dtype=torch.float64).to(dtype)
        y = op.gelu(x)
        dx = torch.ops.gelu.backward(torch.ones_like(x), x)
        assert not y.isnan().any() and not dx[:-1].isnan().any()
        assert torch.equal(y[[0, 2, 4, -1]], x[[0, 2, 4, -1]])
        assert (y[[1, 3]] == 0).all()
        assert dx[0] == 1 and dx[1] == 0
        finite = x[2:-1]
        assert_matches(SPEC, y[2:-1], reference.gelu_reference(finite.double()), dtype)
        assert_matches(SPEC, dx[2:-1], reference.gelu_backward_reference(
            torch.ones_like(finite).double(), finite.double()), dtype)
        assert op.gelu(torch.tensor([float("nan")], device=device, dtype=dtype)).isnan().all()
