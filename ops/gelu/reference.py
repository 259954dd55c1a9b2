"""Plain-PyTorch reference for the gelu op (the sigmoid approximation
x * sigmoid(1.702 x)), written for clarity.

Tests and notebooks compare the op against it; importing this module builds nothing.
"""

from __future__ import annotations

import torch

from ops.common import pointwise_reference

ALPHA = 1.702

TOLERANCES = pointwise_reference.TOLERANCES


def gelu_reference(x: torch.Tensor) -> torch.Tensor:
    """gelu(x) ~= x * sigmoid(1.702 x)."""
    return x * torch.sigmoid(ALPHA * x)


def gelu_backward_reference(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """d/dx [x s(a x)] = s + a x s (1 - s), with s = sigmoid(a x), from the input x."""
    s = torch.sigmoid(ALPHA * x)
    return grad * (s + ALPHA * x * s * (1 - s))


def example_inputs(device="cpu", dtype=torch.float32, numel: int = 4096) -> torch.Tensor:
    """Fresh random input (spread over the range where gelu bends and saturates)."""
    return pointwise_reference.random_input(device, dtype, numel, scale=3)


def check_cases(device="cpu") -> dict[str, dict]:
    """The checks of the function, autograd.Function and nn.Module routes
    (:func:`ops.common.pointwise_reference.check_cases`)."""
    return pointwise_reference.check_cases(device, gelu_reference, example_inputs,
                                           ('gelu', 'GELUFunction', 'GELU'))
