"""ROIAlign, specified as tests: torchvision's ``roi_align`` forward and its gradient with
respect to the input, on every device and floating dtype, for both pixel conventions
(``aligned``) and fixed or adaptive sampling.

Expected values come from torchvision when it is installed (float32/float64), else from
the float64 loop reference in ops/detection/reference.py; 16-bit inputs are always
compared with the reference (torchvision computes their geometry in 16 bits).
"""

from __future__ import annotations

import math

import pytest
import torch

import jit_loader
from jit_tools.tools.testing import FLOATING_DTYPES, OpTester
from ops.detection import reference

try:
    import torchvision
except ImportError:  # the in-repo reference stands in
    torchvision = None

DTYPES = list(FLOATING_DTYPES)
SAMPLING_RATIOS = [-1, 1, 2, 3]


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("detection")


def expected(input, rois, output_size, spatial_scale, sampling_ratio, aligned):
    """Forward and input gradient of sum(out * grad) for a fixed random grad."""
    x = input.detach().double().requires_grad_()
    if torchvision is not None:
        out = torchvision.ops.roi_align(x, rois.to(x), output_size, spatial_scale, sampling_ratio, aligned)
    else:
        out = reference.roi_align_reference(x, rois, output_size, spatial_scale, sampling_ratio, aligned)
    return x, out


def assert_close(got, want, dtype):
    torch.testing.assert_close(got.double().cpu(), want.double().cpu(), **reference.TOLERANCES[dtype])


def feature_map(device, dtype, batch=2, channels=5, height=13, width=17):
    return torch.randn(batch, channels, height, width, device=device, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", SAMPLING_RATIOS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_and_backward(op, device, dtype, sampling_ratio, aligned):
    x = feature_map(device, dtype).requires_grad_()
    rois = reference.random_rois(9, 2, 13, 17, spatial_scale=0.5, device=device, dtype=dtype)
    out = op.roi_align(x, rois, (3, 4), 0.5, sampling_ratio, aligned)
    grad = torch.randn_like(out)
    out.backward(grad)
    if dtype in (torch.float32, torch.float64):
        ref_x, want = expected(x, rois, (3, 4), 0.5, sampling_ratio, aligned)
    else:
        ref_x = x.detach().double().requires_grad_()
        want = reference.roi_align_reference(ref_x, rois, (3, 4), 0.5, sampling_ratio, aligned)
    want.backward(grad.double())
    assert out.dtype == dtype and out.shape == (9, 5, 3, 4)
    assert_close(out, want, dtype)
    assert x.grad.dtype == dtype
    assert_close(x.grad, ref_x.grad, dtype)


def test_list_of_boxes_equals_rois(op, device):
    x = feature_map(device, torch.float32)
    rois = reference.random_rois(8, 2, 13, 17, device=device)
    rois[:, 0] = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1], dtype=rois.dtype)
    boxes = [rois[:3, 1:], rois[3:, 1:]]
    assert torch.equal(op.roi_align(x, boxes, 2, 1.0, 2), op.roi_align(x, rois, 2, 1.0, 2))
    assert torch.equal(op.RoIAlign(2, 1.0, 2)(x, boxes), op.roi_align(x, rois, 2, 1.0, 2))


def test_autograd_function_and_module(op, device):
    x = feature_map(device, torch.float64).requires_grad_()
    rois = reference.random_rois(5, 2, 13, 17, device=device, dtype=torch.float64)
    a = op.RoIAlignFunction.apply(x, rois, (2, 3), 1.0, 2, True)
    b = op.RoIAlign((2, 3), 1.0, 2, aligned=True)(x, rois)
    assert torch.equal(a, b)
    (ga,) = torch.autograd.grad(a.sum(), x)
    (gb,) = torch.autograd.grad(b.sum(), x)
    torch.testing.assert_close(ga, gb)


def test_strided_input(op, device):
    """Layouts the op tester's leave out: every other channel, and channels_last."""
    base = feature_map(device, torch.float32, channels=10)
    x = base[:, ::2]  # every other channel
    assert not x.is_contiguous()
    channels_last = x.contiguous(memory_format=torch.channels_last)
    rois = reference.random_rois(7, 2, 13, 17, device=device)
    want = op.roi_align(x.contiguous(), rois, 3, 1.0, 2)
    assert torch.equal(op.roi_align(x, rois, 3, 1.0, 2), want)
    assert torch.equal(op.roi_align(channels_last, rois, 3, 1.0, 2), want)


def test_rois_outside_and_degenerate(op, device):
    """Rois past the border sample zeros there; zero-size rois sample a point (aligned=False
    makes them one pixel wide, aligned=True keeps them empty: adaptive sampling takes none)."""
    x = feature_map(device, torch.float64).requires_grad_()
    rois = torch.tensor([[0, -50.0, -50.0, -30.0, -30.0],   # entirely outside: zeros
                         [1, 3.0, 4.0, 3.0, 4.0],           # zero size
                         [0, 10.0, 2.0, 5.0, 1.0],          # x2 < x1, y2 < y1
                         [1, -3.0, -2.0, 40.0, 30.0]],      # larger than the map
                        dtype=torch.float64, device=device)
    for aligned in (False, True):
        for sampling_ratio in (-1, 2):
            out = op.roi_align(x, rois, 3, 1.0, sampling_ratio, aligned)
            assert not out[0].any()
            want = reference.roi_align_reference(x.detach(), rois, 3, 1.0, sampling_ratio, aligned)
            assert_close(out, want, torch.float64)
            ref_x = x.detach().requires_grad_()
            reference.roi_align_reference(ref_x, rois, 3, 1.0, sampling_ratio, aligned).sum().backward()
            (grad,) = torch.autograd.grad(out.sum(), x)
            assert_close(grad, ref_x.grad, torch.float64)


@pytest.mark.parametrize("aligned", [False, True])
def test_adaptive_grid_unchanged_up_to_its_cap(op, device, aligned):
    """Adaptive sampling takes torchvision's ceil(bin) samples per axis for every bin up to
    the map's length plus two pixels: the whole map as one bin, and rois output_size times
    the map, give torchvision's values."""
    x = feature_map(device, torch.float64).requires_grad_()  # 13 x 17
    h, w = 13, 17
    cases = {1: [[0, 0.0, 0.0, w, h],                               # the map as one bin
                 [1, -1.0, -1.0, w + 1.0, h + 1.0]],                # and a pixel more each side
             3: [[0, -1.0, -1.0, 3 * (w + 1.0), 3 * (h + 1.0)],     # bins at the cap
                 [1, 2.0, 3.0, 9.0, 11.0]]}
    for output_size, boxes in cases.items():
        rois = torch.tensor(boxes, dtype=torch.float64, device=device)
        assert math.ceil((rois[:, 4] - rois[:, 2]).max().item() / output_size) == h + 2
        assert math.ceil((rois[:, 3] - rois[:, 1]).max().item() / output_size) == w + 2
        out = op.roi_align(x, rois, output_size, 1.0, -1, aligned)
        ref_x, want = expected(x, rois, output_size, 1.0, -1, aligned)
        assert_close(out, want, torch.float64)
        grad = torch.randn_like(out)
        (got,) = torch.autograd.grad(out, x, grad)
        want.backward(grad)
        assert_close(got, ref_x.grad, torch.float64)


def test_diverged_box_is_sampled_at_the_cap(op, device):
    """A box such as a diverged regressor gives ([0, 0, 0, 1e9, 1e9], sampling_ratio=-1)
    would need 1e16 samples per bin in torchvision: here a bin is sampled at most
    (map length + 2) times per axis, so it returns at once, matches the reference that
    applies the same cap, and rois beside it are unaffected."""
    x = feature_map(device, torch.float64).requires_grad_()
    rois = torch.tensor([[0, 0.0, 0.0, 1e9, 1e9],
                         [1, -40.0, -30.0, 60.0, 50.0],     # past the cap: 34 > 19 and 27 > 15
                         [1, 2.0, 3.0, 9.0, 11.0]], dtype=torch.float64, device=device)
    assert reference.max_adaptive_grid(17) == 19 and reference.max_adaptive_grid(13) == 15
    out = op.roi_align(x, rois, 3, 1.0, -1, False)
    want = reference.roi_align_reference(x.detach(), rois, 3, 1.0, -1, False)
    assert_close(out, want, torch.float64)
    assert not out[0].any()  # every sample of the huge box lies far outside the map
    assert_close(out[2:], op.roi_align(x, rois[2:], 3, 1.0, -1, False), torch.float64)
    ref_x = x.detach().requires_grad_()
    reference.roi_align_reference(ref_x, rois, 3, 1.0, -1, False).sum().backward()
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert_close(grad, ref_x.grad, torch.float64)
    big = torch.tensor([[0, -1e9, -1e9, 1e9, 1e9]], dtype=torch.float32, device=device)
    assert torch.isfinite(op.roi_align(x.detach().float(), big, 7, 1.0, -1, True)).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_roi_coordinates(op, device, bad):
    """Documented behaviour: samples at non-finite positions count zero; no crash, and the
    finite rois are unaffected."""
    x = feature_map(device, torch.float32).requires_grad_()
    rois = reference.random_rois(6, 2, 13, 17, device=device)
    rois[2, 1] = bad
    rois[4, 4] = bad
    for sampling_ratio in (-1, 2):
        out = op.roi_align(x, rois, 3, 1.0, sampling_ratio)
        good = [0, 1, 3, 5]
        assert torch.equal(out[good], op.roi_align(x, rois[good], 3, 1.0, sampling_ratio))
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("aligned", [False, True])
def test_gradgradcheck(op, device, aligned):
    """The backward's own gradient is the forward (a linear op); the gradient of every
    sampling grid is the op tester's gradcheck."""
    x = torch.randn(2, 2, 6, 7, device=device, dtype=torch.float64, requires_grad=True)
    rois = reference.random_rois(4, 2, 6, 7, spatial_scale=0.5, device=device, dtype=torch.float64)
    assert torch.autograd.gradgradcheck(lambda t: op.roi_align(t, rois, (2, 3), 0.5, 2, aligned), (x,))


class TestDetection(OpTester):
    """The op tester's checks of NMS and batched NMS (exact kept indices) and ROIAlign (every
    sampling grid, both conventions, no rois, no channels): reference.check_cases."""
    op_name = "detection"


@pytest.mark.cuda
def test_cuda_backward_is_deterministic(op):
    x = torch.randn(2, 64, 50, 60, device="cuda", requires_grad=True)
    rois = reference.random_rois(300, 2, 50, 60, device="cuda")
    out = op.roi_align(x, rois, 7, 1.0, 2)
    grad = torch.randn_like(out)
    (a,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    (b,) = torch.autograd.grad(out, x, grad)
    assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
@pytest.mark.parametrize("channels, output_size", [(160, 7), (5, (2, 9)), (3, (3, 400))])
def test_cuda_backward_matches_cpu(op, channels, output_size, sampling_ratio, aligned):
    """The CUDA backward's tiles (many per map, partial channel groups, channel counts that
    do not fill a vector) and, for a large output, its fallback, against the CPU kernel.
    In float64: a pixel here sums hundreds of terms, more than the float32 row of the
    tolerance table (meant for single values) allows for rounding."""
    x = torch.randn(2, channels, 37, 45, dtype=torch.float64)
    rois = reference.random_rois(150, 2, 37, 45, spatial_scale=0.5, dtype=torch.float64)
    out = op.roi_align(x, rois, output_size, 0.5, sampling_ratio, aligned)
    grad = torch.randn_like(out)
    ph, pw = out.shape[-2:]
    want = torch.ops.detection.roi_align_backward(grad, rois, 0.5, ph, pw, *x.shape, sampling_ratio, aligned)
    got = torch.ops.detection.roi_align_backward(grad.cuda(), rois.cuda(), 0.5, ph, pw, *x.shape,
                                                 sampling_ratio, aligned)
    assert_close(got, want, torch.float64)


def test_fake_kernels_reject_meta_mixed_with_cpu(op):
    x = feature_map("cpu", torch.float32)
    rois = reference.random_rois(4, 2, 13, 17, device="cpu")
    with pytest.raises(RuntimeError, match=r"detection.roi_align: rois is on meta but input is on cpu"):
        op.roi_align(x, rois.to("meta"), 3)
    grad = torch.randn(4, 5, 3, 3, device="meta")
    with pytest.raises(RuntimeError,
                       match=r"detection.roi_align_backward: rois is on cpu but grad is on meta"):
        torch.ops.detection.roi_align_backward(grad, rois, 1.0, 3, 3, 2, 5, 13, 17, -1, False)


def test_bad_inputs(op, device):
    x = feature_map(device, torch.float32)
    rois = reference.random_rois(4, 2, 13, 17, device=device)
    with pytest.raises(RuntimeError, match=r"input must be a 4-D tensor, got 3-D"):
        op.roi_align(x[0], rois, 3)
    with pytest.raises(RuntimeError, match=r"rois.size\(1\) must be 5, got 4"):
        op.roi_align(x, rois[:, 1:], 3)
    with pytest.raises(RuntimeError, match=r"rois must be a 2-D tensor, got 1-D"):
        op.roi_align(x, rois[0], 3)
    with pytest.raises(RuntimeError, match=r"output_size must be positive, got \(0, 3\)"):
        op.roi_align(x, rois, (0, 3))
    with pytest.raises(RuntimeError, match=r"input must be a floating-point tensor, got Long"):
        op.roi_align(x.long(), rois, 3)
    with pytest.raises(RuntimeError, match=r"boxes\[1\] must be a \(K, 4\) tensor, got \(3, 5\)"):
        op.roi_align(x, [rois[:2, 1:], rois[:3]], 3)
    if device == "cpu":
        bad = rois.clone()
        bad[2, 0] = 2
        with pytest.raises(RuntimeError, match=r"rois\[2, 0\] must be a batch index in \[0, 2\), got 2"):
            op.roi_align(x, bad, 3)
    else:
        with pytest.raises(RuntimeError, match=r"rois is on cpu but input is on cuda"):
            op.roi_align(x, rois.cpu(), 3)
