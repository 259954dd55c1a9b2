"""Plain-PyTorch reference for the sigmoid op, written for clarity.

Tests and notebooks compare the op against it; importing this module builds nothing.
"""

from __future__ import annotations

import torch

from ops.common import pointwise_reference

TOLERANCES = pointwise_reference.TOLERANCES


def sigmoid_reference(x: torch.Tensor) -> torch.Tensor:
    """sigmoid(x) = 1 / (1 + e^-x)."""
    return 1 / (1 + torch.exp(-x))


def sigmoid_backward_reference(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d sigmoid / dx = (1 - y) * y, from the forward's output y."""
    return grad * (1 - y) * y


def example_inputs(device="cpu", dtype=torch.float32, numel: int = 4096) -> torch.Tensor:
    """Fresh random input (spread over the range where sigmoid bends and saturates)."""
    return pointwise_reference.random_input(device, dtype, numel, scale=4)


def check_cases(device="cpu") -> dict[str, dict]:
    """The checks of the function, autograd.Function and nn.Module routes
    (:func:`ops.common.pointwise_reference.check_cases`)."""
    return pointwise_reference.check_cases(device, sigmoid_reference, example_inputs,
                                           ('sigmoid', 'SigmoidFunction', 'Sigmoid'))
