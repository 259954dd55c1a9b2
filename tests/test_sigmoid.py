"""The sigmoid op, specified as tests: sigmoid(x) = 1 / (1 + e^-x) forward, and the
backward (1 - y) * y * grad from the saved output y, on every device and floating
dtype, for any shape and layout.

The tests it shares with gelu are in pointwise_tester.py, and the checks of every op in
jit_tools/tools/testing.py; this module adds sigmoid's own: agreement with ATen's
sigmoid_backward, and saturation.
"""

from __future__ import annotations

import pytest
import torch

from ops.sigmoid import reference
from pointwise_tester import DTYPES, PointwiseSpec, PointwiseTester, assert_matches, random_input

SPEC = PointwiseSpec(
    name="sigmoid", function="sigmoid", autograd_function="SigmoidFunction", module="Sigmoid",
    reference=reference.sigmoid_reference,
    backward_reference=reference.sigmoid_backward_reference, eager=torch.sigmoid,
    saves_output=True, tolerances=reference.TOLERANCES, input_scale=4.0)


class TestSigmoid(PointwiseTester):
    op_name = "sigmoid"
    SPEC = SPEC

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_backward_matches_aten(self, op, device, dtype):
        y = torch.sigmoid(random_input(SPEC, 4099, device, dtype))
        grad = random_input(SPEC, 4099, device, dtype, scale=1.0)
        assert_matches(SPEC, torch.ops.sigmoid.backward(grad, y),
                       torch.ops.aten.sigmoid_backward(grad, y), dtype)

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_saturates_without_overflow(self, op, device, dtype):
        """e^-x of a large positive x is never formed: no inf / inf, no NaN."""
        big = torch.finfo(dtype).max
        x = torch.tensor([big, -big, 1e4, -1e4, 100.0, -100.0, 30.0, -30.0, 0.0, -0.0,
                          float("inf"), float("-inf")], device=device, dtype=torch.float64).to(dtype)
        y = op.sigmoid(x)
        assert not y.isnan().any()
        assert_matches(SPEC, y, reference.sigmoid_reference(x.double()), dtype)
        assert y[0] == 1 and y[1] == 0 and y[-2] == 1 and y[-1] == 0
        assert op.sigmoid(torch.tensor([float("nan")], device=device, dtype=dtype)).isnan().all()
