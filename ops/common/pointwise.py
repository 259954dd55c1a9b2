"""The Python surface every elementwise activation op shares (sigmoid, gelu), over its
dispatcher ops ``<ns>::forward(x)`` and ``<ns>::backward(grad, saved)``: the fake kernels,
the autograd declaration, and the bases of its autograd.Function and nn.Module.

An op's ``<op>.py`` calls :func:`register` with its ``Library`` (so that the loader can
withdraw these registrations when it reloads the op) and declares what differs: the tensor
backward takes, the names and the docstrings. The dispatcher ops are resolved once per
build (the loader runs the op's file again for every build); functions handed out earlier
still call the newest build, as an ``OpOverload`` outlives a reload (the loader keeps its
operator entry).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import jit_loader


@dataclass(frozen=True)
class Surface:
    forward: torch._ops.OpOverload
    backward: torch._ops.OpOverload
    Function: type  # autograd.Function base: saves x or y, backward is the backward op
    Module: type    # nn.Module base: forward is the forward op


def _check_floating(op: str, name: str, t: torch.Tensor) -> None:
    torch._check(t.is_floating_point(),
                 lambda: f"{op}: {name} must be a floating-point tensor, got {t.dtype}")


def register(ns: str, lib: torch.library.Library, saves_output: bool) -> Surface:
    """Fake kernels and autograd of ``ns::forward``/``ns::backward`` through ``lib``; backward
    takes the output y (``saves_output``) or the input x. Returns the ops, resolved once."""
    saved = "y" if saves_output else "x"

    @torch.library.register_fake(f"{ns}::forward", lib=lib)
    def _forward_fake(x):
        _check_floating(f"{ns}.forward", "x", x)
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake(f"{ns}::backward", lib=lib)
    def _backward_fake(grad, s):
        jit_loader.check_same_device(f"{ns}.backward", **{saved: s}, grad=grad)
        _check_floating(f"{ns}.backward", saved, s)
        torch._check(grad.dtype == s.dtype, lambda: f"{ns}.backward: grad has dtype {grad.dtype} "
                                                    f"but {saved} has dtype {s.dtype}")
        torch._check(grad.shape == s.shape, lambda: f"{ns}.backward: grad has shape "
                                                    f"{list(grad.shape)} but {saved} has shape "
                                                    f"{list(s.shape)}")
        return torch.empty_like(s, memory_format=torch.contiguous_format)

    # The gradient is the backward op of the output or the input: declared once, served by
    # the loader's C++ autograd kernel where it is built (no Python per call), else by
    # register_autograd.
    jit_loader.register_autograd_op(f"{ns}::forward", f"{ns}::backward",
                                    ["grad", "result" if saves_output else "x"], lib=lib)

    # Resolved here, once per build, rather than at each call: through the packet a call
    # looks up two attributes and resolves the overload in Python, every time (the layers
    # experiments/profile_call.py times). jit_loader.fast_op: calls from Python take the
    # loader's fast entry instead of torch.ops's generic argument conversion.
    forward_op = jit_loader.fast_op(getattr(torch.ops, ns).forward.default)
    backward_op = jit_loader.fast_op(getattr(torch.ops, ns).backward.default)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = forward_op(x)
            ctx.save_for_backward(y if saves_output else x)
            return y

        @staticmethod
        def backward(ctx, grad):
            (s,) = ctx.saved_tensors
            return backward_op(grad, s)

    class Module(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return forward_op(x)

    return Surface(forward_op, backward_op, Function, Module)
