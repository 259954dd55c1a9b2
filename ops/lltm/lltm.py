"""Python surface of the LLTM op: ``lltm`` (function), ``LLTMFunction`` (autograd.Function)
and ``LLTM`` (nn.Module), all on the dispatcher ops ``torch.ops.lltm.forward/backward``.

``torch.ops.lltm.forward(input, weights, bias, old_h, old_cell)`` returns
``(new_h, new_cell, gates, hx)``: the last two (activated gates and ``[old_h, input]``)
are what backward needs, and are not differentiable. ``torch.ops.lltm.backward(grad_h,
grad_cell, new_cell, gates, hx, weights, output_mask)`` returns the gradients of the five
inputs, None where ``output_mask`` is False (those GEMMs are skipped).
The op's autograd kernel is registered in C++ (lltm.cpp); this module adds the fake
kernels that torch.compile and opcheck need.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

import jit_loader

from .reference import LLTMReference

jit_loader.load_library(__file__)

LIB = torch.library.Library("lltm", "FRAGMENT")


@torch.library.register_fake("lltm::forward", lib=LIB)
def _forward_fake(input, weights, bias, old_h, old_cell):
    jit_loader.check_same_device("lltm.forward", input=input, weights=weights, bias=bias,
                                 old_h=old_h, old_cell=old_cell)
    batch, features = input.shape
    state = old_h.shape[1]
    torch._check(weights.shape == (3 * state, state + features),
                 lambda: f"lltm.forward: weights must have shape {(3 * state, state + features)}, "
                         f"got {tuple(weights.shape)}")
    new = input.new_empty
    return new(batch, state), new(batch, state), new(batch, 3 * state), new(batch, state + features)


@torch.library.register_fake("lltm::backward", lib=LIB)
def _backward_fake(grad_h, grad_cell, new_cell, gates, hx, weights, output_mask):
    jit_loader.check_same_device("lltm.backward", new_cell=new_cell, grad_h=grad_h,
                                 grad_cell=grad_cell, gates=gates, hx=hx, weights=weights)
    batch, state = new_cell.shape
    shapes = ((batch, hx.shape[1] - state), weights.shape, (3 * state,), (batch, state),
              (batch, state))
    return tuple(new_cell.new_empty(shape) if needed else None
                 for shape, needed in zip(shapes, output_mask))


# Resolved once per build (the loader runs this file again for every build), not through
# the packet per call, and called through the loader's fast entry (jit_loader.fast_op); an
# OpOverload outlives a reload, so functions handed out earlier call the newest build.
_FORWARD = jit_loader.fast_op(torch.ops.lltm.forward.default)
_BACKWARD = jit_loader.fast_op(torch.ops.lltm.backward.default)


def lltm(input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor,
         old_cell: Tensor) -> Tuple[Tensor, Tensor]:
    """One LLTM step, differentiable; returns ``(new_h, new_cell)``."""
    if torch.jit.is_scripting():
        # TorchScript compiles only this branch: it knows torch.ops.<namespace>.<op>, not a
        # module's global.
        new_h, new_cell, _, _ = torch.ops.lltm.forward(input, weights, bias, old_h, old_cell)
    else:
        new_h, new_cell, _, _ = _FORWARD(input, weights, bias, old_h, old_cell)
    return new_h, new_cell


class LLTMFunction(torch.autograd.Function):
    """The tutorial's route: an explicit autograd.Function around the forward and backward
    ops. ``lltm`` does the same in C++ (the op's own autograd kernel) and is faster."""

    @staticmethod
    def forward(ctx, input, weights, bias, old_h, old_cell):
        new_h, new_cell, gates, hx = _FORWARD(input, weights, bias, old_h, old_cell)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(new_cell, gates, hx, weights)
        return new_h, new_cell

    @staticmethod
    def backward(ctx, grad_h, grad_cell):
        if grad_h is None and grad_cell is None:
            return None, None, None, None, None
        new_cell, gates, hx, weights = ctx.saved_tensors
        # Grads are not materialised: a missing one becomes a broadcast zero scalar.
        if grad_h is None or grad_cell is None:
            zero = new_cell.new_zeros(()).expand_as(new_cell)
            grad_h = zero if grad_h is None else grad_h
            grad_cell = zero if grad_cell is None else grad_cell
        return _BACKWARD(grad_h, grad_cell, new_cell, gates, hx, weights, list(ctx.needs_input_grad))


class LLTM(LLTMReference):
    """The LLTM cell on the native op: the reference's parameters and initialisation,
    inherited so the two cannot drift; only ``forward`` differs."""

    def forward(self, input: Tensor, state: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tensor]:
        return lltm(input, self.weights, self.bias, state[0], state[1])
