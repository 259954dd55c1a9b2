"""The sigmoid op, specified as tests: sigmoid(x) = 1 / (1 + e^-x) forward, and the
backward (1 - y) * y * grad from the saved output y, on every device and floating
dtype, for any shape and layout.

The tests it shares with gelu are in pointwise_cases.py, run here with ``spec``; this
module adds sigmoid's own: agreement with ATen's sigmoid_backward, and saturation.
"""

from __future__ import annotations

import pytest
import torch

import jit_loader
from ops.sigmoid import reference
from pointwise_cases import *  # noqa: F401,F403  (the shared tests, collected here)
from pointwise_cases import DTYPES, PointwiseSpec, assert_matches, random_input

SPEC = PointwiseSpec(
    name="sigmoid", function="sigmoid", autograd_function="SigmoidFunction", module="Sigmoid",
    reference=reference.sigmoid_reference,
    backward_reference=reference.sigmoid_backward_reference, eager=torch.sigmoid,
    saves_output=True, tolerances=reference.TOLERANCES, input_scale=4.0)


@pytest.fixture(scope="module")
def spec():
    return SPEC


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("sigmoid")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_matches_aten(op, device, dtype):
    y = torch.sigmoid(random_input(SPEC, 4099, device, dtype))
    grad = random_input(SPEC, 4099, device, dtype, scale=1.0)
    assert_matches(SPEC, torch.ops.sigmoid.backward(grad, y),
                   torch.ops.aten.sigmoid_backward(grad, y), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_saturates_without_overflow(op, device, dtype):
    """e^-x of a large positive x is never formed: no inf / inf, no NaN."""
    big = torch.finfo(dtype).max
    x = torch.tensor([big, -big, 1e4, -1e4, 100.0, -100.0, 30.0, -30.0, 0.0, -0.0,
                      float("inf"), float("-inf")], device=device, dtype=torch.float64).to(dtype)
    y = op.sigmoid(x)
    assert not y.isnan().any()
    assert_matches(SPEC, y, reference.sigmoid_reference(x.double()), dtype)
    assert y[0] == 1 and y[1] == 0 and y[-2] == 1 and y[-1] == 0
    assert op.sigmoid(torch.tensor([float("nan")], device=device, dtype=dtype)).isnan().all()
