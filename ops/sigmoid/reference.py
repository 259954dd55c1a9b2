"""Plain-PyTorch reference for the sigmoid op, written for clarity.

Tests and notebooks compare the op against it; importing this module builds nothing.
"""

from __future__ import annotations

import torch

# Agreement expected with the float64 reference, per input dtype: 16-bit results are
# computed in float and rounded once.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-6, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=8e-3, rtol=8e-3),
}


def sigmoid_reference(x: torch.Tensor) -> torch.Tensor:
    """sigmoid(x) = 1 / (1 + e^-x)."""
    return 1 / (1 + torch.exp(-x))


def sigmoid_backward_reference(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d sigmoid / dx = (1 - y) * y, from the forward's output y."""
    return grad * (1 - y) * y


def example_inputs(device="cpu", dtype=torch.float32, numel: int = 4096) -> torch.Tensor:
    """Fresh random input (spread over the range where sigmoid bends and saturates)."""
    x = torch.randn(numel, device=device, dtype=torch.float32) * 4
    return x.to(dtype).requires_grad_()


def check_cases(device="cpu") -> dict[str, dict]:
    """What every check of the op runs (``jit_loader.check_op``; tests/op_tester.py makes a
    test of each): the surface's function, autograd.Function and nn.Module on fresh random
    inputs against the reference evaluated in float64 on the same values, in float32 and
    float64, plus bfloat16 on CUDA, within TOLERANCES. Each case is jit_loader.check's
    arguments, ``fn`` naming the surface function."""
    dtypes = (torch.float32, torch.float64)
    if torch.device(device).type == "cuda":
        dtypes += (torch.bfloat16,)
    return {route: dict(fn=fn, inputs=(example_inputs(device, torch.float64),),
                        reference=sigmoid_reference, dtypes=dtypes, reference_dtype=torch.float64)
            for route, fn in (("function", "sigmoid"), ("autograd.Function", "SigmoidFunction"),
                              ("nn.Module", "Sigmoid"))}
