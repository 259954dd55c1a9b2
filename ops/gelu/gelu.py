"""Python surface of the gelu op (x * sigmoid(1.702 x)): a differentiable function,
an explicit autograd.Function and an nn.Module over ``torch.ops.gelu.forward/backward``.

Registered through ``LIB`` so that the loader can withdraw these registrations when
it reloads the op. The dispatcher ops are resolved once per build (the loader runs this
file again for every build); functions handed out earlier still call the newest build, as
an ``OpOverload`` outlives a reload (the loader keeps its operator entry).
"""

from __future__ import annotations

import torch

import jit_loader

jit_loader.load_library(__file__)

LIB = torch.library.Library("gelu", "FRAGMENT")

ALPHA = 1.702


def _check_floating(op: str, name: str, t: torch.Tensor) -> None:
    torch._check(t.is_floating_point(),
                 lambda: f"{op}: {name} must be a floating-point tensor, got {t.dtype}")


@torch.library.register_fake("gelu::forward", lib=LIB)
def _forward_fake(x):
    _check_floating("gelu.forward", "x", x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("gelu::backward", lib=LIB)
def _backward_fake(grad, x):
    jit_loader.check_same_device("gelu.backward", x=x, grad=grad)
    _check_floating("gelu.backward", "x", x)
    torch._check(grad.dtype == x.dtype,
                 lambda: f"gelu.backward: grad has dtype {grad.dtype} but x has dtype {x.dtype}")
    torch._check(grad.shape == x.shape,
                 lambda: f"gelu.backward: grad has shape {list(grad.shape)} but x has shape {list(x.shape)}")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# The gradient is the backward op of the input: declared once, served by the loader's C++
# autograd kernel where it is built (no Python per call), else by register_autograd.
jit_loader.register_autograd_op("gelu::forward", "gelu::backward", ["grad", "x"], lib=LIB)

# Resolved here, once per build, rather than at each call: through the packet a call
# looks up two attributes and resolves the overload in Python, every time (the layers
# experiments/profile_call.py times).
_FORWARD = torch.ops.gelu.forward.default
_BACKWARD = torch.ops.gelu.backward.default


def gelu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(1.702 * x)``, differentiable; the twin of ``F.gelu`` up to the
    approximation."""
    return _FORWARD(x)


class GELUFunction(torch.autograd.Function):
    """The same op as an explicit autograd.Function (saves the input)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _FORWARD(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _BACKWARD(grad, x)


class GELU(torch.nn.Module):
    """Drop-in for ``torch.nn.GELU`` with the sigmoid approximation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu(x)
