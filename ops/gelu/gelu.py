"""Python surface of the gelu op (x * sigmoid(1.702 x)): a differentiable function,
an explicit autograd.Function and an nn.Module over ``torch.ops.gelu.forward/backward``.

What gelu shares with the other elementwise ops, and how its registrations through ``LIB``
live across reloads, is in ops/common/pointwise.py.
"""

from __future__ import annotations

import torch

import jit_loader
from ops.common import pointwise

jit_loader.load_library(__file__)

LIB = torch.library.Library("gelu", "FRAGMENT")

ALPHA = 1.702

# The backward takes the input x.
_SURFACE = pointwise.register("gelu", LIB, saves_output=False)
_FORWARD = _SURFACE.forward


def gelu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(1.702 * x)``, differentiable; the twin of ``F.gelu`` up to the
    approximation."""
    return _FORWARD(x)


class GELUFunction(_SURFACE.Function):
    """The same op as an explicit autograd.Function (saves the input)."""


class GELU(_SURFACE.Module):
    """Drop-in for ``torch.nn.GELU`` with the sigmoid approximation."""
