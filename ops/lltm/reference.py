"""Pure-PyTorch LLTM cell: the oracle of the tests and the "Python" baseline of the benchmarks.

The LLTM (PyTorch C++/CUDA extension tutorial) is an LSTM-like cell with no forget gate
and an ELU candidate. With ``X = [old_h, input]`` and ``W`` of shape
``(3 * state_size, state_size + input_features)``::

    input_gate, output_gate, candidate = (X @ W.T + bias).chunk(3, dim=1)
    input_gate, output_gate = sigmoid(input_gate), sigmoid(output_gate)
    candidate = elu(candidate, alpha=1)
    new_cell = old_cell + candidate * input_gate
    new_h = tanh(new_cell) * output_gate

Importing this module builds nothing, so notebooks and the main job can use it freely.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["lltm_reference", "LLTMReference", "reset_parameters", "example_inputs", "selfcheck"]

GRAD_NAMES = ("input", "weights", "bias", "old_h", "old_cell")


def lltm_reference(input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor,
                   old_cell: Tensor) -> Tuple[Tensor, Tensor]:
    """One LLTM step; returns ``(new_h, new_cell)``."""
    X = torch.cat([old_h, input], dim=1)
    gate_weights = torch.addmm(bias, X, weights.t())
    gates = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = F.elu(gates[2], alpha=1.0)
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


def reset_parameters(weights: Tensor, bias: Tensor) -> None:
    """The tutorial's initialisation: every parameter uniform in ``±1/sqrt(state_size)``."""
    bound = 1.0 / math.sqrt(weights.shape[0] // 3)
    with torch.no_grad():
        weights.uniform_(-bound, bound)
        bias.uniform_(-bound, bound)


class LLTMReference(nn.Module):
    """The LLTM cell in plain PyTorch: ``forward(input, (old_h, old_cell)) -> (new_h, new_cell)``."""

    def __init__(self, input_features: int, state_size: int):
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = nn.Parameter(torch.empty(3 * state_size))
        reset_parameters(self.weights, self.bias)

    def forward(self, input: Tensor, state: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tensor]:
        old_h, old_cell = state
        return lltm_reference(input, self.weights, self.bias, old_h, old_cell)

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


def example_inputs(device="cpu", dtype=torch.float32, batch: int = 16, input_features: int = 32,
                   state_size: int = 128, requires_grad: bool = True):
    """Fresh random ``(input, weights, bias, old_h, old_cell)``, parameters scaled as initialised."""
    kw = dict(device=device, dtype=dtype)
    bound = 1.0 / math.sqrt(state_size)
    tensors = (
        torch.randn(batch, input_features, **kw),
        (torch.rand(3 * state_size, input_features + state_size, **kw) * 2 - 1) * bound,
        (torch.rand(3 * state_size, **kw) * 2 - 1) * bound,
        torch.randn(batch, state_size, **kw),
        torch.randn(batch, state_size, **kw),
    )
    return tuple(t.requires_grad_(requires_grad) for t in tensors)


# Tolerances of selfcheck, relative to the largest magnitude of the float64 reference.
SELFCHECK_TOL = {torch.float64: 1e-10, torch.float32: 2e-5}


def _forward_backward(fn, inputs, grad_outputs):
    outputs = fn(*inputs)
    grads = torch.autograd.grad(outputs, inputs, grad_outputs)
    return [o.detach() for o in outputs], list(grads)


def selfcheck(op, device="cpu", batch: int = 8, input_features: int = 24,
              state_size: int = 40) -> list[dict]:
    """Compare ``op.lltm`` (a loaded op handle) with the reference: forward outputs and all
    five gradients, on fresh random float64 and float32 inputs, each against the reference
    evaluated in float64 on the same values. Returns one row per (quantity, dtype)."""
    rows = []
    for dtype in (torch.float64, torch.float32):
        inputs = example_inputs(device, dtype, batch, input_features, state_size)
        ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
        grad_outputs = [torch.randn(batch, state_size, device=device, dtype=dtype) for _ in range(2)]
        ref_out, ref_grads = _forward_backward(lltm_reference, ref_inputs,
                                               [g.double() for g in grad_outputs])
        out, grads = _forward_backward(op.lltm, inputs, grad_outputs)
        checks = [("forward", out, ref_out)]
        checks += [(f"grad {name}", [g], [r]) for name, g, r in zip(GRAD_NAMES, grads, ref_grads)]
        for check, got, want in checks:
            scale = max(1.0, max(w.abs().max().item() for w in want))
            err = max((g.double() - w).abs().max().item() for g, w in zip(got, want))
            tol = SELFCHECK_TOL[dtype] * scale
            rows.append({"op": "lltm", "check": f"{check} {str(dtype).removeprefix('torch.')}",
                         "device": str(device), "max_abs_err": err, "tol": tol, "ok": err <= tol})
    return rows
