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


def _row(check: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> dict:
    tol = TOLERANCES[dtype]
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    limit = tol["atol"] + tol["rtol"] * (want.abs().max().item() if want.numel() else 0.0)
    return {"op": "sigmoid", "check": check, "max_abs_err": err, "tol": limit, "ok": err <= limit}


def selfcheck(op, device="cpu") -> list[dict]:
    """Forward and backward of ``op`` (the handle from ``jit_loader.load("sigmoid")``,
    its Python module, or any sigmoid function) against the reference, on fresh random
    inputs in float32 and float64, plus bfloat16 on CUDA. One row per check."""
    fn = getattr(op, "sigmoid", op)
    dtypes = [torch.float32, torch.float64]
    if torch.device(device).type == "cuda":
        dtypes.append(torch.bfloat16)
    rows = []
    for dtype in dtypes:
        x = example_inputs(device, dtype)
        y = fn(x)
        grad = torch.randn_like(y)
        y.backward(grad)
        want_y = sigmoid_reference(x.detach().double())
        rows.append(_row(f"forward {str(dtype).removeprefix('torch.')}", y.detach(), want_y, dtype))
        want_dx = sigmoid_backward_reference(grad.double(), want_y)
        rows.append(_row(f"backward {str(dtype).removeprefix('torch.')}", x.grad, want_dx, dtype))
    return rows
