"""The resize op, specified as tests: bilinear resize of (N, C, H, W) tensors under three
pixel conventions (half_pixel, align_corners, asymmetric), forward and deterministic
backward, on every device and floating dtype, in contiguous and channels_last layouts.

half_pixel and align_corners are PyTorch's two conventions, so there the op must agree
with F.interpolate(mode="bilinear") and its backward, including F.interpolate's rule for
how a given scale_factor sets the scale. asymmetric (TensorFlow 1.x) has no PyTorch twin:
it is checked against the NumPy reference written from its formula and hand-computed cases.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._prims_common import suggest_memory_format

import jit_loader
from jit_tools.tools.testing import FLOATING_DTYPES, OpTester
from ops.resize import reference
from ops.resize.reference import TOLERANCES

DTYPES = list(FLOATING_DTYPES)
MODES = ["half_pixel", "align_corners", "asymmetric"]
TORCH_MODES = ["half_pixel", "align_corners"]
LAYOUTS = ["nchw", "channels_last"]
# (input H, W) -> (output H, W): 2x, 3x, 1.5x, 0.5x, 7 -> 3, output length 1, mixed.
RESIZES = [((8, 8), (16, 16)), ((5, 6), (15, 18)), ((8, 10), (12, 15)), ((12, 14), (6, 7)),
           ((7, 7), (3, 3)), ((6, 9), (1, 1)), ((1, 5), (4, 1)), ((9, 4), (13, 2))]


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("resize")


def random_input(shape, device, dtype, layout="nchw"):
    x = torch.randn(shape, device=device).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x


def assert_close(got, want, dtype):
    assert got.dtype == dtype
    assert got.shape == want.shape
    torch.testing.assert_close(got.double().cpu(), want.double().cpu(), **TOLERANCES[dtype])


def interpolate(x, mode, **kwargs):
    """F.interpolate in float32 for 16-bit inputs: the op accumulates in float, rounds once."""
    x32 = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return F.interpolate(x32, mode="bilinear", align_corners=mode == "align_corners", **kwargs)


def torch_grad(x, grad, mode, **kwargs):
    x32 = x.detach().float() if x.dtype in (torch.float16, torch.bfloat16) else x.detach()
    x32.requires_grad_()
    y = F.interpolate(x32, mode="bilinear", align_corners=mode == "align_corners", **kwargs)
    (g,) = torch.autograd.grad(y, x32, grad.to(y.dtype))
    return g


def check_resizes(op, device, mode, dtype, layout, forward, backward):
    """The op on every case of RESIZES, its output against ``forward(x, out_hw)`` and its
    gradient against ``backward(x, grad, out_hw)``."""
    for in_hw, out_hw in RESIZES:
        x = random_input((2, 3, *in_hw), device, dtype, layout).requires_grad_()
        y = op.resize_bilinear(x, size=out_hw, coordinate_mode=mode)
        assert_close(y, forward(x, out_hw), dtype)
        grad = random_input(y.shape, device, dtype, layout)
        y.backward(grad)
        assert_close(x.grad, backward(x, grad, out_hw), dtype)


# ----------------------------------------------------------- agreement with PyTorch


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", TORCH_MODES)
def test_matches_interpolate(op, device, mode, dtype, layout):
    check_resizes(op, device, mode, dtype, layout,
                  lambda x, out_hw: interpolate(x.detach(), mode, size=out_hw),
                  lambda x, grad, out_hw: torch_grad(x, grad, mode, size=out_hw))


@pytest.mark.parametrize("recompute", [None, False, True])
@pytest.mark.parametrize("mode", TORCH_MODES)
def test_scale_factor_rule_matches_interpolate(op, device, mode, recompute):
    """With scale_factor, F.interpolate sizes the output floor(in * s) and, unless
    recompute_scale_factor, uses 1 / s as the scale, not in / out: 5 * 1.7 gives 8 pixels
    sampled at 1/1.7 = 0.588 input pixels each, not 5/8 = 0.625."""
    for in_hw, factor in [((5, 6), (1.7, 2.3)), ((10, 9), (0.45, 0.7)), ((4, 4), 3.0), ((7, 3), (0.5, 1.0))]:
        x = random_input((2, 2, *in_hw), device, torch.float64).requires_grad_()
        kwargs = dict(scale_factor=factor, recompute_scale_factor=recompute)
        y = op.resize_bilinear(x, coordinate_mode=mode, **kwargs)
        assert_close(y, interpolate(x.detach(), mode, **kwargs), torch.float64)
        grad = torch.randn_like(y)
        y.backward(grad)
        assert_close(x.grad, torch_grad(x, grad, mode, **kwargs), torch.float64)


def test_scale_factor_changes_half_pixel_scale(op, device):
    x = random_input((1, 1, 5, 5), device, torch.float64)
    by_factor = op.resize_bilinear(x, scale_factor=1.7)
    by_size = op.resize_bilinear(x, size=(8, 8))
    recomputed = op.resize_bilinear(x, scale_factor=1.7, recompute_scale_factor=True)
    assert by_factor.shape == by_size.shape == (1, 1, 8, 8)
    assert torch.equal(recomputed, by_size)
    assert not torch.allclose(by_factor, by_size)


# ------------------------------------------------------------- the NumPy reference


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_matches_reference(op, device, mode, dtype, layout):
    check_resizes(op, device, mode, dtype, layout,
                  lambda x, out_hw: reference.resize_reference(x, out_hw, mode),
                  lambda x, grad, out_hw: reference.resize_backward_reference(grad, x.shape, mode))


@pytest.mark.parametrize("mode, row", [
    # [1, 2] stretched to 4 pixels; src per output pixel in the comment.
    ("asymmetric", [1.0, 1.5, 2.0, 2.0]),             # 0, 0.5, 1, 1.5 (TensorFlow 1.x)
    ("half_pixel", [1.0, 1.25, 1.75, 2.0]),           # 0 (clamped), 0.25, 0.75, 1.25
    ("align_corners", [1.0, 4 / 3, 5 / 3, 2.0]),      # 0, 1/3, 2/3, 1
])
def test_hand_computed_upscale(op, device, mode, row):
    x = torch.tensor([[[[1.0, 2.0]]]], device=device, dtype=torch.float64)
    y = op.resize_bilinear(x, size=(1, 4), coordinate_mode=mode)
    torch.testing.assert_close(y.flatten().cpu(), torch.tensor(row, dtype=torch.float64))


@pytest.mark.parametrize("mode, row", [
    ("asymmetric", [0.0, 2.0, 4.0]),         # src 0, 2, 4: TF1 samples the left pixels
    ("half_pixel", [0.5, 2.5, 4.5]),         # src 0.5, 2.5, 4.5: pixel centres
    ("align_corners", [0.0, 2.5, 5.0]),      # src 0, 2.5, 5: both ends
])
def test_hand_computed_downscale(op, device, mode, row):
    x = torch.arange(6.0, device=device, dtype=torch.float64).reshape(1, 1, 1, 6)
    y = op.resize_bilinear(x, size=(1, 3), coordinate_mode=mode)
    torch.testing.assert_close(y.flatten().cpu(), torch.tensor(row, dtype=torch.float64))


def test_asymmetric_backward_hand_computed(op, device):
    """[a, b] -> 4 pixels at src 0, 0.5, 1, 1.5: b receives 0.5 g1 + g2 + g3 (1.5 is past the
    last pixel, so both its taps are b)."""
    x = torch.tensor([[[[1.0, 2.0]]]], device=device, dtype=torch.float64, requires_grad=True)
    y = op.resize_bilinear(x, size=(1, 4), convention="tensorflow1")
    y.backward(torch.tensor([[[[1.0, 10.0, 100.0, 1000.0]]]], device=device, dtype=torch.float64))
    torch.testing.assert_close(x.grad.flatten().cpu(), torch.tensor([6.0, 1105.0], dtype=torch.float64))


# ------------------------------------------------------------------ layouts and shapes


@pytest.mark.parametrize("layout", LAYOUTS)
def test_output_keeps_memory_format(op, device, layout):
    x = random_input((2, 5, 6, 7), device, torch.float32, layout).requires_grad_()
    y = op.resize_bilinear(x, scale_factor=2)
    channels_last = layout == "channels_last"
    assert y.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert y.is_contiguous() != channels_last
    y.backward(torch.randn_like(y))
    assert x.grad.is_contiguous(memory_format=torch.channels_last) == channels_last


@pytest.mark.parametrize("case", ["n111_channels_last", "n11w_sliced", "1c1w_transposed",
                                  "one_channel_channels_last", "size1_h_channels_last",
                                  "permuted_nhcw"])
def test_output_format_is_the_one_torch_suggests(op, device, case):
    """The host reads the memory format off the strides as torch's suggest_memory_format
    does (which the fake kernels call), ambiguous size-1 layouts included."""
    cl = torch.channels_last
    x = {"n111_channels_last": lambda: torch.randn(3, 1, 1, 1).contiguous(memory_format=cl),
         "n11w_sliced": lambda: torch.randn(3, 1, 1, 8)[..., :1],
         "1c1w_transposed": lambda: torch.randn(1, 5, 1, 4).transpose(1, 3),
         "one_channel_channels_last": lambda: torch.randn(2, 1, 5, 6).contiguous(memory_format=cl),
         "size1_h_channels_last": lambda: torch.randn(2, 3, 1, 6).contiguous(memory_format=cl),
         "permuted_nhcw": lambda: torch.randn(2, 5, 3, 6).permute(0, 2, 1, 3)}[case]()
    x = x.to(device=device, dtype=torch.float64)
    want = suggest_memory_format(x)
    y = torch.ops.resize.forward(x, [4, 3], "half_pixel", None)
    assert y.stride() == torch.empty(y.shape, memory_format=want).stride()
    assert_close(y, reference.resize_reference(x, (4, 3), "half_pixel"), torch.float64)
    grad_in = torch.ops.resize.backward(torch.randn_like(y), list(x.shape), "half_pixel", None)
    assert grad_in.stride() == torch.empty(x.shape, memory_format=suggest_memory_format(y)).stride()


@pytest.mark.parametrize("view", ["step_slice", "expanded"])
def test_strided_inputs(op, device, view):
    """Views the op tester's layouts leave out: steps and an offset in both H and W, and a
    batch broadcast by a zero stride."""
    base = torch.randn(3, 4, 10, 12, device=device, dtype=torch.float64)
    x = {"step_slice": base[:, :, ::2, 1::3], "expanded": base[:1].expand(3, 4, 10, 12)}[view]
    before = x.clone()
    for mode in MODES:
        y = op.resize_bilinear(x, size=(7, 13), coordinate_mode=mode)
        assert_close(y, reference.resize_reference(x, (7, 13), mode), torch.float64)
        grad = torch.randn(7, 13, 4, 3, device=device, dtype=torch.float64).permute(3, 2, 0, 1)
        assert_close(torch.ops.resize.backward(grad, list(x.shape), mode, None),
                     reference.resize_backward_reference(grad, x.shape, mode), torch.float64)
    assert torch.equal(x, before)


def test_same_size_is_identity(op, device):
    x = random_input((2, 3, 5, 7), device, torch.float32)
    for mode in MODES:
        assert torch.equal(op.resize_bilinear(x, size=(5, 7), coordinate_mode=mode), x)


@pytest.mark.cuda
def test_large_upscale_matches_cpu(op):
    """Ratios past the kernel's register fast path (5x, 8 readers per input column), and a
    plane large enough for several row blocks per column."""
    x = torch.randn(2, 3, 19, 23, dtype=torch.float64)
    grad = torch.randn(2, 3, 95, 115, dtype=torch.float64)
    for mode in MODES:
        for g, xx in ((grad, x), (grad.contiguous(memory_format=torch.channels_last),
                                  x.contiguous(memory_format=torch.channels_last))):
            want = torch.ops.resize.backward(g, list(xx.shape), mode, None)
            got = torch.ops.resize.backward(g.cuda(), list(xx.shape), mode, None)
            torch.testing.assert_close(got.cpu(), want, **TOLERANCES[torch.float64])
            torch.testing.assert_close(torch.ops.resize.forward(xx.cuda(), [95, 115], mode, None).cpu(),
                                       torch.ops.resize.forward(xx, [95, 115], mode, None),
                                       **TOLERANCES[torch.float64])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_tiled_sizes_match_cpu(op, dtype):
    """Rows long enough for the CUDA kernels' tiles: partial tiles in both directions, rows
    whose length is not a multiple of 4, several tiles per plane, ratios up to where a
    tile's rows no longer fit shared memory (80 rows from 3)."""
    resizes = [((70, 130), (140, 260)), ((45, 99), (67, 150)), ((150, 230), (64, 98)),
               ((128, 132), (64, 66)), ((19, 70), (95, 350)), ((9, 200), (200, 9)),
               ((3, 80), (150, 80))]
    for in_hw, out_hw in resizes:
        for layout in LAYOUTS:
            x = random_input((2, 3, *in_hw), "cpu", dtype, layout)
            grad = random_input((2, 3, *out_hw), "cpu", dtype, layout)
            for mode in MODES:
                want = torch.ops.resize.forward(x, list(out_hw), mode, None)
                got = torch.ops.resize.forward(x.cuda(), list(out_hw), mode, None)
                assert got.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")
                assert_close(got, want, dtype)
                want = torch.ops.resize.backward(grad, list(x.shape), mode, None)
                got = torch.ops.resize.backward(grad.cuda(), list(x.shape), mode, None)
                assert_close(got, want, dtype)
                assert torch.equal(torch.ops.resize.backward(grad.cuda(), list(x.shape), mode, None), got)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_channel_vectors_match_cpu(op, dtype):
    """channels_last with channels a multiple of 16 bytes: the backward's channel-vector
    kernel. Upscaling past its register fast path (x6), downscaling that leaves input
    pixels unread (7 -> 3), mixed ratios, a buffer 16-byte aligned and one that is not."""
    resizes = [((16, 12), (32, 24)), ((20, 9), (7, 54)), ((31, 33), (13, 14)), ((5, 70), (80, 30))]
    for in_hw, out_hw in resizes:
        for aligned in (True, False):
            shape = (2, 16, *out_hw)
            numel = 2 * 16 * out_hw[0] * out_hw[1]
            flat = torch.randn(numel + 1, device="cuda", dtype=torch.float64).to(dtype)
            flat = flat[:numel] if aligned else flat[1:]
            grad = flat.view(shape[0], *out_hw, shape[1]).permute(0, 3, 1, 2)
            assert grad.is_contiguous(memory_format=torch.channels_last)
            for mode in MODES:
                want = torch.ops.resize.backward(grad.cpu(), [2, 16, *in_hw], mode, None)
                got = torch.ops.resize.backward(grad, [2, 16, *in_hw], mode, None)
                assert got.is_contiguous(memory_format=torch.channels_last)
                assert_close(got, want, dtype)
                assert torch.equal(torch.ops.resize.backward(grad, [2, 16, *in_hw], mode, None), got)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_nchw_upscale_strips_match_cpu(op, dtype):
    """NCHW upscaling along x with whole 16-byte groups per row: the backward's strip
    kernel. One strip and several (where interior strips' output windows are too wide for
    it: the row tiles), partial strips and row blocks, 1.5x, y not scaled, and a grad_output
    that is not 16-byte aligned (the row tiles)."""
    resizes = [((33, 128), (66, 256)), ((21, 300), (43, 600)), ((16, 96), (24, 144)),
               ((10, 64), (10, 128)), ((9, 200), (31, 352))]
    for in_hw, out_hw in resizes:
        for aligned in (True, False):
            numel = 2 * 3 * out_hw[0] * out_hw[1]
            flat = torch.randn(numel + 1, device="cuda").to(dtype)
            grad = (flat[:numel] if aligned else flat[1:]).view(2, 3, *out_hw)
            for mode in MODES:
                want = torch.ops.resize.backward(grad.cpu(), [2, 3, *in_hw], mode, None)
                got = torch.ops.resize.backward(grad, [2, 3, *in_hw], mode, None)
                assert got.is_contiguous()
                assert_close(got, want, dtype)
                assert torch.equal(torch.ops.resize.backward(grad, [2, 3, *in_hw], mode, None), got)


# -------------------------------------------------------------------- determinism


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_backward_bitwise_repeatable(op, device, dtype, layout):
    """No atomics: the same grad gives the same bits, every run."""
    for mode in MODES:
        grad = random_input((4, 8, 64, 48), device, dtype, layout)
        first = torch.ops.resize.backward(grad, [4, 8, 29, 23], mode, None)
        for _ in range(3):
            assert torch.equal(torch.ops.resize.backward(grad, [4, 8, 29, 23], mode, None), first)


# ------------------------------------------------------------------ autograd surface


@pytest.mark.parametrize("mode", MODES)
def test_gradgradcheck(op, device, mode):
    """The backward is linear in the output's gradient, and differentiable in turn (the
    gradient itself is the op tester's gradcheck)."""
    for in_hw, out_hw in [((4, 5), (7, 3)), ((3, 3), (6, 8))]:
        x = random_input((2, 2, *in_hw), device, torch.float64).requires_grad_()
        assert torch.autograd.gradgradcheck(
            lambda t: op.resize_bilinear(t, size=out_hw, coordinate_mode=mode), (x,))


def test_module_autograd_function_and_conventions(op, device):
    x = random_input((2, 3, 5, 4), device, torch.float64).requires_grad_()
    want = reference.resize_reference(x, (10, 8), "asymmetric")
    grad = torch.randn(2, 3, 10, 8, device=device, dtype=torch.float64)
    want_grad = reference.resize_backward_reference(grad, x.shape, "asymmetric")
    for fn in (op.Resize(size=(10, 8), convention="tensorflow1"),
               op.Resize(scale_factor=2, coordinate_mode="asymmetric"),
               lambda t: op.ResizeBilinearFunction.apply(t, [10, 8], "asymmetric"),
               lambda t: op.resize_bilinear(t, (10, 8), convention="tensorflow1", align_corners=False)):
        x.grad = None
        y = fn(x)
        y.backward(grad)
        assert_close(y, want, torch.float64)
        assert_close(x.grad, want_grad, torch.float64)
    assert op.resolve_coordinate_mode() == "half_pixel"
    assert op.resolve_coordinate_mode(convention="pytorch", align_corners=True) == "align_corners"
    assert op.resolve_coordinate_mode(convention="tensorflow1", align_corners=True) == "align_corners"
    assert op.resolve_coordinate_mode(align_corners=False) == "half_pixel"
    assert "asymmetric" in repr(op.Resize(size=3, convention="tensorflow1"))


class TestResize(OpTester):
    """The op tester's checks of every case of reference.check_cases: each coordinate mode
    up and down, by scale factors in channels_last, empty batch and channels."""
    op_name = "resize"


# ------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(size=(4, 4), scale_factor=2), ValueError, "exactly one of size and scale_factor"),
    (dict(), ValueError, "exactly one of size and scale_factor"),
    (dict(size=(0, 4)), ValueError, r"size must be positive, got \(0, 4\)"),
    (dict(size=-3), ValueError, "size must be positive, got -3"),
    (dict(size=(2, 3, 4)), ValueError, "size must be one value or two"),
    (dict(size=2.5), TypeError, "size must be an int"),
    (dict(scale_factor=0), ValueError, "scale_factor must be positive and finite, got 0"),
    (dict(scale_factor=(2, -1.0)), ValueError, "scale_factor must be positive and finite"),
    (dict(scale_factor=0.1), ValueError, "scale_factor 0.1 gives an empty output for an input length of 5"),
    (dict(size=4, coordinate_mode="nearest"), ValueError, "coordinate_mode must be one of"),
    (dict(size=4, convention="onnx"), ValueError, "convention must be one of"),
    (dict(size=4, coordinate_mode="half_pixel", align_corners=True), ValueError,
     "either coordinate_mode or convention/align_corners"),
    (dict(size=4, recompute_scale_factor=True), ValueError, "recompute_scale_factor is not meaningful"),
])
def test_rejects_bad_arguments(op, device, kwargs, error, message):
    x = torch.randn(1, 2, 5, 5, device=device)
    with pytest.raises(error, match=message):
        op.resize_bilinear(x, **kwargs)


def test_rejects_bad_input(op, device):
    with pytest.raises(ValueError, match=r"input must be a 4-D tensor \(N, C, H, W\), got \[2, 5, 5\]"):
        op.resize_bilinear(torch.randn(2, 5, 5, device=device), size=4)
    fwd, bwd = torch.ops.resize.forward, torch.ops.resize.backward
    x = torch.randn(1, 2, 5, 5, device=device)
    cases = [
        (lambda: fwd(torch.randn(2, 5, 5, device=device), [4, 4], "half_pixel", None),
         r"resize.forward: input must be a 4-D tensor \(N, C, H, W\), got 3-D with shape \[2, 5, 5\]"),
        (lambda: fwd(x.long(), [4, 4], "half_pixel", None),
         "resize.forward: input must be a floating-point tensor, got Long"),
        (lambda: fwd(x, [4, 0], "half_pixel", None), r"resize.forward: output_size must be positive, got \[4, 0\]"),
        (lambda: fwd(x, [4, 4], "bicubic", None), "resize.forward: coordinate_mode must be one of 'half_pixel', "
                                                  "'align_corners', 'asymmetric', got 'bicubic'"),
        (lambda: fwd(x, [4, 4], "half_pixel", [2.0, 0.0]),
         "resize.forward: scale_factors must be positive and finite"),
        (lambda: fwd(torch.randn(1, 2, 0, 5, device=device), [4, 4], "half_pixel", None),
         r"resize.forward: input height and width must be positive, got \[0, 5\]"),
        (lambda: bwd(torch.randn(1, 2, 4, device=device), [1, 2, 5, 5], "half_pixel", None),
         r"resize.backward: grad_output must be a 4-D tensor"),
        (lambda: bwd(torch.randn(1, 3, 4, 4, device=device), [1, 2, 5, 5], "half_pixel", None),
         r"resize.backward: grad_output has shape \[1, 3, 4, 4\] but input_size is \[1, 2, 5, 5\]"),
        (lambda: bwd(torch.randn(1, 2, 4, 4, device=device), [1, 2, 5, 5], "tf", None),
         "resize.backward: coordinate_mode must be one of"),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError, match=message):
            call()

