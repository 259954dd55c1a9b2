"""Python surface of the sigmoid op: a differentiable function, an explicit
autograd.Function and an nn.Module over ``torch.ops.sigmoid.forward/backward``.

Registered through ``LIB`` so that the loader can withdraw these registrations when
it reloads the op. The dispatcher ops are resolved once per build (the loader runs this
file again for every build); functions handed out earlier still call the newest build, as
an ``OpOverload`` outlives a reload (the loader keeps its operator entry).
"""

from __future__ import annotations

import torch

import jit_loader

jit_loader.load_library(__file__)

LIB = torch.library.Library("sigmoid", "FRAGMENT")


def _check_floating(op: str, name: str, t: torch.Tensor) -> None:
    torch._check(t.is_floating_point(),
                 lambda: f"{op}: {name} must be a floating-point tensor, got {t.dtype}")


@torch.library.register_fake("sigmoid::forward", lib=LIB)
def _forward_fake(x):
    _check_floating("sigmoid.forward", "x", x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("sigmoid::backward", lib=LIB)
def _backward_fake(grad, y):
    jit_loader.check_same_device("sigmoid.backward", y=y, grad=grad)
    _check_floating("sigmoid.backward", "y", y)
    torch._check(grad.dtype == y.dtype,
                 lambda: f"sigmoid.backward: grad has dtype {grad.dtype} but y has dtype {y.dtype}")
    torch._check(grad.shape == y.shape,
                 lambda: f"sigmoid.backward: grad has shape {list(grad.shape)} but y has shape {list(y.shape)}")
    return torch.empty_like(y, memory_format=torch.contiguous_format)


# The gradient is the backward op of the output: declared once, served by the loader's C++
# autograd kernel where it is built (no Python per call), else by register_autograd.
jit_loader.register_autograd_op("sigmoid::forward", "sigmoid::backward", ["grad", "result"], lib=LIB)

# Resolved here, once per build, rather than at each call: through the packet a call
# looks up two attributes and resolves the overload in Python, every time (the layers
# experiments/profile_call.py times).
_FORWARD = torch.ops.sigmoid.forward.default
_BACKWARD = torch.ops.sigmoid.backward.default


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + exp(-x))``, differentiable; the twin of ``torch.sigmoid``."""
    return _FORWARD(x)


class SigmoidFunction(torch.autograd.Function):
    """The same op as an explicit autograd.Function (saves the output)."""

    @staticmethod
    def forward(ctx, x):
        y = _FORWARD(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _BACKWARD(grad, y)


class Sigmoid(torch.nn.Module):
    """Drop-in for ``torch.nn.Sigmoid``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sigmoid(x)
