"""Plain NumPy reference for the resize op, written from the formulas, for clarity.

Per axis, output index d reads input coordinate src (``source_coordinates``), then the
taps i0 = floor(src) and i1 = min(i0 + 1, in - 1) with weights 1 - l and l, l = src - i0.
A resize is therefore two small matrices: out = A_h @ x @ A_w^T, and its backward
grad_in = A_h^T @ grad @ A_w. Tests and notebooks compare the op against it; importing
this module builds nothing.
"""

from __future__ import annotations

import numpy as np
import torch

COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric")

# Agreement expected with the reference, per dtype. Coordinates are computed as the op
# does (float32 for float32 and 16-bit data, float64 for float64), so the difference is the
# rounding of four products and sums: 16-bit results are computed in float, rounded once.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=8e-3, rtol=8e-3),
}


def coordinate_dtype(dtype: torch.dtype):
    return np.float64 if dtype == torch.float64 else np.float32


def axis_scale(in_size: int, out_size: int, mode: str, scale_factor=None, dtype=np.float64):
    """Input pixels per output pixel, by F.interpolate's rule: align_corners ignores a scale
    factor; otherwise 1 / scale_factor when one is given, else in / out."""
    if mode == "align_corners":
        return dtype(in_size - 1) / dtype(out_size - 1) if out_size > 1 else dtype(0)
    if scale_factor is not None:
        return dtype(1.0 / scale_factor)
    return dtype(in_size) / dtype(out_size)


def source_coordinates(in_size: int, out_size: int, mode: str, scale_factor=None, dtype=np.float64):
    """src for every output index, rounded once to ``dtype`` (the op's accumulation type):
    with a float32 scale, (d + 0.5) * scale - 0.5 and d * scale are exact in float64."""
    if mode not in COORDINATE_MODES:
        raise ValueError(f"unknown coordinate mode {mode!r}")
    d = np.arange(out_size, dtype=np.float64)
    scale = np.float64(axis_scale(in_size, out_size, mode, scale_factor, dtype))
    if mode == "half_pixel":
        return np.maximum(((d + 0.5) * scale - 0.5).astype(dtype), 0)
    return (d * scale).astype(dtype)


def interpolation_matrix(in_size: int, out_size: int, mode: str, scale_factor=None, dtype=np.float64):
    """A (out_size, in_size) float64 matrix: row d holds the two tap weights of output d."""
    a = np.zeros((out_size, in_size))
    for d, src in enumerate(source_coordinates(in_size, out_size, mode, scale_factor, dtype)):
        i0 = min(int(np.floor(src)), in_size - 1)
        i1 = min(i0 + 1, in_size - 1)
        lam = min(float(src - dtype(i0)), 1.0)
        a[d, i0] += 1 - lam
        a[d, i1] += lam
    return a


def _matrices(in_hw, out_hw, mode, scale_factors, dtype):
    sf = scale_factors if scale_factors is not None else (None, None)
    cdt = coordinate_dtype(dtype)
    return (interpolation_matrix(in_hw[0], out_hw[0], mode, sf[0], cdt),
            interpolation_matrix(in_hw[1], out_hw[1], mode, sf[1], cdt))


def resize_reference(x: torch.Tensor, output_size, mode: str = "half_pixel", scale_factors=None) -> torch.Tensor:
    """Bilinear resize of an (N, C, H, W) tensor, in float64 (on the CPU)."""
    a_h, a_w = _matrices(x.shape[2:], output_size, mode, scale_factors, x.dtype)
    out = np.einsum("oh,nchw,pw->ncop", a_h, x.detach().double().cpu().numpy(), a_w)
    return torch.from_numpy(out)


def resize_backward_reference(grad: torch.Tensor, input_size, mode: str = "half_pixel",
                              scale_factors=None) -> torch.Tensor:
    """Gradient of the input given the output's: the transposed matrices, in float64."""
    a_h, a_w = _matrices(input_size[2:], grad.shape[2:], mode, scale_factors, grad.dtype)
    out = np.einsum("oh,ncop,pw->nchw", a_h, grad.detach().double().cpu().numpy(), a_w)
    return torch.from_numpy(out)


def example_inputs(device="cpu", dtype=torch.float32, shape=(2, 3, 9, 11)) -> torch.Tensor:
    """Fresh random input (N, C, H, W)."""
    return torch.randn(shape, device=device).to(dtype).requires_grad_()


class _ResizeReference(torch.autograd.Function):
    """resize_reference, with resize_backward_reference as its gradient."""

    @staticmethod
    def forward(ctx, x, size, scale_factors, mode):
        ctx.input_shape, ctx.dtype, ctx.mode, ctx.scale_factors = x.shape, x.dtype, mode, scale_factors
        return resize_reference(x, size, mode, scale_factors).to(x.device)

    @staticmethod
    def backward(ctx, grad):
        # In the input's dtype, as the op's backward gets it: its coordinates are the op's.
        grad_in = resize_backward_reference(grad.to(ctx.dtype), ctx.input_shape, ctx.mode,
                                            ctx.scale_factors)
        return grad_in.to(device=grad.device, dtype=ctx.dtype), None, None, None


def resize_bilinear_reference(x: torch.Tensor, size, scale_factors=None, mode: str = "half_pixel"):
    """The references with resize_bilinear's positional arguments, differentiable in x;
    without a size, F.interpolate's: floor(in * scale_factor) per axis."""
    if size is None:
        size = [int(n * f) for n, f in zip(x.shape[2:], scale_factors)]
    return _ResizeReference.apply(x, size, scale_factors, mode)


def check_cases(device="cpu") -> dict[str, dict]:
    """What every check of the op runs (``jit_loader.check_op``; the op tester makes a
    test of each): forward and backward against the reference in every coordinate mode,
    upscaling and downscaling to a size; by scale factors (F.interpolate's rule for the
    scale) in channels_last, whose memory format the fake kernels must give too; an empty
    batch and no channels. In float32 and float64, within TOLERANCES. Each case is
    jit_loader.check's arguments, ``fn`` naming the surface function."""
    def sample(shape=(2, 2, 5, 7), channels_last=False):
        x = example_inputs(device, torch.float64, shape).detach()
        return x.contiguous(memory_format=torch.channels_last if channels_last else
                            torch.contiguous_format).requires_grad_()

    def case(x, size, factors, mode):
        return dict(fn="resize_bilinear", inputs=(x, size, factors, mode),
                    reference=resize_bilinear_reference)

    cases = {f"{mode} 5x7->{h}x{w}": case(sample(), (h, w), None, mode)
             for mode in COORDINATE_MODES for h, w in ((9, 13), (3, 4))}
    for mode, factors in (("half_pixel", (1.6, 0.9)), ("align_corners", (1.6, 0.9)),
                          ("asymmetric", (2.5, 0.75))):
        cases[f"{mode} channels_last x{factors[0]}x{factors[1]}"] = case(
            sample(channels_last=True), None, factors, mode)
    cases["asymmetric x2.5x0.75"] = case(sample(), None, (2.5, 0.75), "asymmetric")
    cases["empty batch"] = case(sample((0, 2, 5, 7)), (9, 13), None, "half_pixel")
    cases["no channels"] = case(sample((2, 0, 5, 7)), (3, 4), None, "align_corners")
    return cases
