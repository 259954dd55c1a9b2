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

__all__ = ["lltm_reference", "LLTMReference", "reset_parameters", "example_inputs", "check_cases",
           "TOLERANCES"]

# The op against the reference evaluated in float64 on the same values, per dtype. 16-bit:
# gates and new_cell are stored in the dtype between forward and backward, and the weight
# gradient sums up to 130 rows of such values, hence the absolute terms.
TOLERANCES = {
    torch.float64: dict(atol=1e-10, rtol=1e-9),
    torch.float32: dict(atol=2e-5, rtol=1e-4),
    torch.float16: dict(atol=2e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=1.5e-1, rtol=5e-2),
}


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


# check_cases holds forward outputs and all five gradients to one absolute bound per dtype.
CHECK_TOLERANCES = {torch.float64: dict(atol=1e-10, rtol=0.0), torch.float32: dict(atol=2e-5, rtol=0.0)}


def check_cases(device="cpu", batch: int = 8, input_features: int = 6,
                state_size: int = 10) -> dict[str, dict]:
    """What every check of the op runs (``jit_loader.check_op``; the op tester makes a
    test of each): the function and the autograd.Function, forward outputs and all five
    gradients on fresh random inputs in float64 and float32, each against the reference
    evaluated in float64 on the same values; the gradients of the parameters alone (the
    backward's output mask); an empty batch. Each case is jit_loader.check's arguments,
    ``fn`` naming the surface function. The cell is small: gradcheck calls the op twice per
    element of every input (the sizes of each kernel route are tests/test_lltm.py's)."""
    def case(fn, inputs):
        return dict(fn=fn, inputs=inputs, reference=lltm_reference, dtypes=(torch.float64, torch.float32),
                    reference_dtype=torch.float64, tolerances=CHECK_TOLERANCES)

    cases = {route: case(fn, example_inputs(device, torch.float64, batch, input_features, state_size))
             for route, fn in (("function", "lltm"), ("autograd.Function", "LLTMFunction"))}
    parameters_only = example_inputs(device, torch.float64, batch, input_features, state_size,
                                     requires_grad=False)
    for t in parameters_only[1:3]:
        t.requires_grad_()
    cases["parameters only"] = case("lltm", parameters_only)
    cases["empty batch"] = case("lltm", example_inputs(device, torch.float64, 0, input_features,
                                                        state_size))
    return cases
