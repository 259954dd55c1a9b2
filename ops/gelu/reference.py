"""Plain-PyTorch reference for the gelu op (the sigmoid approximation
x * sigmoid(1.702 x)), written for clarity.

Tests and notebooks compare the op against it; importing this module builds nothing.
"""

from __future__ import annotations

import torch

ALPHA = 1.702

# Agreement expected with the float64 reference, per input dtype: 16-bit results are
# computed in float and rounded once.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-6, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=8e-3, rtol=8e-3),
}


def gelu_reference(x: torch.Tensor) -> torch.Tensor:
    """gelu(x) ~= x * sigmoid(1.702 x)."""
    return x * torch.sigmoid(ALPHA * x)


def gelu_backward_reference(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """d/dx [x s(a x)] = s + a x s (1 - s), with s = sigmoid(a x), from the input x."""
    s = torch.sigmoid(ALPHA * x)
    return grad * (s + ALPHA * x * s * (1 - s))


def example_inputs(device="cpu", dtype=torch.float32, numel: int = 4096) -> torch.Tensor:
    """Fresh random input (spread over the range where gelu bends and saturates)."""
    x = torch.randn(numel, device=device, dtype=torch.float32) * 3
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
                        reference=gelu_reference, dtypes=dtypes, reference_dtype=torch.float64)
            for route, fn in (("function", "gelu"), ("autograd.Function", "GELUFunction"),
                              ("nn.Module", "GELU"))}
