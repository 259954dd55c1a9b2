"""Python surface of the sigmoid op: a differentiable function, an explicit
autograd.Function and an nn.Module over ``torch.ops.sigmoid.forward/backward``.

What sigmoid shares with the other elementwise ops, and how its registrations through
``LIB`` live across reloads, is in ops/common/pointwise.py.
"""

from __future__ import annotations

import torch

import jit_loader
from ops.common import pointwise

jit_loader.load_library(__file__)

LIB = torch.library.Library("sigmoid", "FRAGMENT")

# The backward takes the output y.
_SURFACE = pointwise.register("sigmoid", LIB, saves_output=True)
_FORWARD = _SURFACE.forward


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + exp(-x))``, differentiable; the twin of ``torch.sigmoid``."""
    return _FORWARD(x)


class SigmoidFunction(_SURFACE.Function):
    """The same op as an explicit autograd.Function (saves the output)."""


class Sigmoid(_SURFACE.Module):
    """Drop-in for ``torch.nn.Sigmoid``."""
