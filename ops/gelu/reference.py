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


def _row(check: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> dict:
    tol = TOLERANCES[dtype]
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    limit = tol["atol"] + tol["rtol"] * (want.abs().max().item() if want.numel() else 0.0)
    return {"op": "gelu", "check": check, "max_abs_err": err, "tol": limit, "ok": err <= limit}


def selfcheck(op, device="cpu") -> list[dict]:
    """Forward and backward of ``op`` (the handle from ``jit_loader.load("gelu")``,
    its Python module, or any gelu function) against the reference, on fresh random
    inputs in float32 and float64, plus bfloat16 on CUDA. One row per check."""
    fn = getattr(op, "gelu", op)
    dtypes = [torch.float32, torch.float64]
    if torch.device(device).type == "cuda":
        dtypes.append(torch.bfloat16)
    rows = []
    for dtype in dtypes:
        x = example_inputs(device, dtype)
        y = fn(x)
        grad = torch.randn_like(y)
        y.backward(grad)
        x64 = x.detach().double()
        name = str(dtype).removeprefix("torch.")
        rows.append(_row(f"forward {name}", y.detach(), gelu_reference(x64), dtype))
        rows.append(_row(f"backward {name}", x.grad, gelu_backward_reference(grad.double(), x64), dtype))
    return rows
