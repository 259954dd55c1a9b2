"""Python surface of the resize op: ``resize_bilinear`` (function), ``ResizeBilinearFunction``
(autograd.Function) and ``Resize`` (nn.Module), all on the dispatcher ops

    torch.ops.resize.forward(input, output_size, coordinate_mode, scale_factors)
    torch.ops.resize.backward(grad_output, input_size, coordinate_mode, scale_factors)

``coordinate_mode`` (the names of ONNX Resize's coordinate_transformation_mode) says how an
output pixel maps to input coordinates, per axis:

    half_pixel     src = (dst + 0.5) * scale - 0.5, clamped at 0   PyTorch align_corners=False,
                                                                  TF2 half_pixel_centers=True
    align_corners  src = dst * (in - 1) / (out - 1)               align_corners=True in both
    asymmetric     src = dst * scale                              TensorFlow 1.x default

``scale`` is in / out, or 1 / scale_factor when a scale factor is given (as F.interpolate).
Registered through ``LIB`` so that the loader can withdraw these registrations when it
reloads the op. The dispatcher ops are resolved once per build (the loader runs this file
again for every build); functions handed out earlier still call the newest build, as an
``OpOverload`` outlives a reload (the loader keeps its operator entry).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
from torch._prims_common import suggest_memory_format

import jit_loader

jit_loader.load_library(__file__)

LIB = torch.library.Library("resize", "FRAGMENT")

COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric")
# convention -> coordinate mode with align_corners False and True.
CONVENTIONS = {
    "pytorch": ("half_pixel", "align_corners"),
    "tensorflow1": ("asymmetric", "align_corners"),
}


def _check_mode(op: str, mode) -> None:
    torch._check(mode in COORDINATE_MODES,
                 lambda: f"{op}: coordinate_mode must be one of 'half_pixel', 'align_corners', "
                         f"'asymmetric', got '{mode}'")


def _check_4d(op: str, name: str, t: torch.Tensor) -> None:
    torch._check(t.dim() == 4, lambda: f"{op}: {name} must be a 4-D tensor (N, C, H, W), got "
                                       f"{t.dim()}-D with shape {list(t.shape)}")
    torch._check(t.is_floating_point(),
                 lambda: f"{op}: {name} must be a floating-point tensor, got {t.dtype}")


def _empty(sizes, like: torch.Tensor, memory_format) -> torch.Tensor:
    return torch.empty(sizes, dtype=like.dtype, device=like.device, memory_format=memory_format)


# The fake kernels give torch.compile and opcheck the result's shape and memory format
# (the suggested format of the tensor each pass reads) without running a kernel.
@torch.library.register_fake("resize::forward", lib=LIB)
def _forward_fake(input, output_size, coordinate_mode, scale_factors):
    _check_4d("resize.forward", "input", input)
    _check_mode("resize.forward", coordinate_mode)
    torch._check(len(output_size) == 2 and output_size[0] > 0 and output_size[1] > 0,
                 lambda: f"resize.forward: output_size must be positive, got {list(output_size)}")
    return _empty((input.shape[0], input.shape[1], *output_size), input, suggest_memory_format(input))


@torch.library.register_fake("resize::backward", lib=LIB)
def _backward_fake(grad_output, input_size, coordinate_mode, scale_factors):
    _check_4d("resize.backward", "grad_output", grad_output)
    _check_mode("resize.backward", coordinate_mode)
    torch._check(len(input_size) == 4,
                 lambda: f"resize.backward: input_size must have 4 entries, got {list(input_size)}")
    return _empty(input_size, grad_output, suggest_memory_format(grad_output))


# Autograd of forward: its backward op. Autograd of backward (a linear map of grad_output):
# its adjoint, the forward op, so second derivatives work too. Served by the loader's C++
# autograd kernel where it is built (no Python per call), else by register_autograd.
jit_loader.register_autograd_op(
    "resize::forward", "resize::backward", ["grad", "input.shape", "coordinate_mode", "scale_factors"],
    lib=LIB)
jit_loader.register_autograd_op(
    "resize::backward", "resize::forward",
    ["grad", "grad_output.shape[2:]", "coordinate_mode", "scale_factors"], lib=LIB)


# Resolved once per build: through the packet, each call would look up two attributes and
# resolve the overload in Python (experiments/profile_call.py times those layers); called
# through the loader's fast entry (jit_loader.fast_op).
_FORWARD = jit_loader.fast_op(torch.ops.resize.forward.default)


def resolve_coordinate_mode(coordinate_mode: Optional[str] = None, convention: Optional[str] = None,
                            align_corners: Optional[bool] = None) -> str:
    """The coordinate mode named directly, or by a framework's spelling: ``convention``
    ("pytorch" or "tensorflow1", default "pytorch") with ``align_corners`` (default False)."""
    if coordinate_mode is not None:
        if convention is not None or align_corners is not None:
            raise ValueError("resize_bilinear: give either coordinate_mode or convention/align_corners, "
                             f"got coordinate_mode={coordinate_mode!r}, convention={convention!r}, "
                             f"align_corners={align_corners!r}")
        if coordinate_mode not in COORDINATE_MODES:
            raise ValueError(f"resize_bilinear: coordinate_mode must be one of {COORDINATE_MODES}, "
                             f"got {coordinate_mode!r}")
        return coordinate_mode
    convention = "pytorch" if convention is None else convention
    if convention not in CONVENTIONS:
        raise ValueError(f"resize_bilinear: convention must be one of {tuple(CONVENTIONS)}, "
                         f"got {convention!r}")
    return CONVENTIONS[convention][1 if align_corners else 0]


def _pair(name: str, value, kind, kind_name: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(values) != 2:
        raise ValueError(f"resize_bilinear: {name} must be one value or two (H, W), got {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, kind) for v in values):
        raise TypeError(f"resize_bilinear: {name} must be {kind_name} or two (H, W), got {value!r}")
    return values


def output_geometry(input_size: Sequence[int], size=None, scale_factor=None,
                    recompute_scale_factor: Optional[bool] = None):
    """``(output_size, scale_factors)`` as F.interpolate computes them from ``size`` or
    ``scale_factor``: output length floor(in * scale_factor), and the scale factors passed
    on to the kernel (which then uses 1 / scale_factor as the scale) unless
    ``recompute_scale_factor`` is true (then the scale is in / out)."""
    if (size is None) == (scale_factor is None):
        raise ValueError("resize_bilinear: give exactly one of size and scale_factor, got "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("resize_bilinear: recompute_scale_factor is not meaningful with an explicit size")
        out = _pair("size", size, (int, torch.SymInt), "an int")
        if not all(v > 0 for v in out):
            raise ValueError(f"resize_bilinear: size must be positive, got {size!r}")
        return out, None
    factors = [float(f) for f in _pair("scale_factor", scale_factor, (int, float), "a number")]
    # Comparisons, not math.isfinite: under torch.compile a factor may be a symbolic float.
    if not all(0 < f < math.inf for f in factors):
        raise ValueError(f"resize_bilinear: scale_factor must be positive and finite, got {scale_factor!r}")
    out = [math.floor(n * f) for n, f in zip(input_size, factors)]
    for n, f, o in zip(input_size, factors, out):
        if o < 1:
            raise ValueError(f"resize_bilinear: scale_factor {f} gives an empty output for an input "
                             f"length of {n}")
    return out, (None if recompute_scale_factor else factors)


def resize_bilinear(input: torch.Tensor, size: Union[int, Sequence[int], None] = None,
                    scale_factor: Union[float, Sequence[float], None] = None,
                    coordinate_mode: Optional[str] = None, *, convention: Optional[str] = None,
                    align_corners: Optional[bool] = None,
                    recompute_scale_factor: Optional[bool] = None) -> torch.Tensor:
    """Bilinear resize of an (N, C, H, W) tensor, differentiable; the twin of
    ``F.interpolate(mode="bilinear")`` with a selectable pixel convention.

    ``size`` or ``scale_factor`` (one value or (H, W)) as in F.interpolate;
    ``coordinate_mode`` one of half_pixel (default), align_corners, asymmetric, or else
    ``convention`` ("pytorch" | "tensorflow1") with ``align_corners``. The output has the
    input's memory format (contiguous or channels_last)."""
    # The usual call, resize_bilinear(x, (h, w)) in PyTorch's convention, in a few
    # comparisons: the general argument handling below costs more than the op's own
    # dispatch on a small image (experiments/RESULTS.md, call-overhead).
    if (type(size) is tuple or type(size) is list) and len(size) == 2 and scale_factor is None \
            and coordinate_mode is None and convention is None and align_corners is None \
            and recompute_scale_factor is None and type(size[0]) is int and type(size[1]) is int \
            and size[0] > 0 and size[1] > 0 and isinstance(input, torch.Tensor) and input.dim() == 4:
        return _FORWARD(input, size, "half_pixel", None)
    if not isinstance(input, torch.Tensor) or input.dim() != 4:
        shape = list(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
        raise ValueError(f"resize_bilinear: input must be a 4-D tensor (N, C, H, W), got {shape}")
    mode = resolve_coordinate_mode(coordinate_mode, convention, align_corners)
    output_size, scale_factors = output_geometry(input.shape[2:], size, scale_factor, recompute_scale_factor)
    return _FORWARD(input, output_size, mode, scale_factors)


class ResizeBilinearFunction(torch.autograd.Function):
    """The same op as an explicit autograd.Function over the dispatcher ops:
    ``apply(input, output_size, coordinate_mode="half_pixel", scale_factors=None)``."""

    @staticmethod
    def forward(ctx, input, output_size, coordinate_mode="half_pixel", scale_factors=None):
        ctx.input_size = list(input.shape)
        ctx.coordinate_mode, ctx.scale_factors = coordinate_mode, scale_factors
        return torch.ops.resize.forward(input, output_size, coordinate_mode, scale_factors)

    @staticmethod
    def backward(ctx, grad):
        grad_input = torch.ops.resize.backward(grad, ctx.input_size, ctx.coordinate_mode, ctx.scale_factors)
        return grad_input, None, None, None


class Resize(torch.nn.Module):
    """``resize_bilinear`` as a module, e.g. ``Resize(scale_factor=2, convention="tensorflow1")``."""

    def __init__(self, size=None, scale_factor=None, coordinate_mode: Optional[str] = None, *,
                 convention: Optional[str] = None, align_corners: Optional[bool] = None,
                 recompute_scale_factor: Optional[bool] = None):
        super().__init__()
        self.size, self.scale_factor = size, scale_factor
        self.coordinate_mode = resolve_coordinate_mode(coordinate_mode, convention, align_corners)
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return resize_bilinear(input, self.size, self.scale_factor, self.coordinate_mode,
                               recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, coordinate_mode={self.coordinate_mode!r}"
