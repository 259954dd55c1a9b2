"""NMS and batched NMS, specified as tests: torchvision's kept indices, exactly.

``nms(boxes, scores, iou_threshold)`` visits boxes by decreasing score and keeps a box
unless a kept box overlaps it with IoU > iou_threshold; it returns the kept indices by
decreasing score. ``batched_nms`` does the same within each category. Expected results
come from torchvision on the same device when it is installed, else from the loop
reference in ops/detection/reference.py (torchvision's CPU semantics).
"""

from __future__ import annotations

import pytest
import torch

import jit_loader
from ops.detection import reference

try:
    import torchvision
except ImportError:  # the in-repo reference stands in
    torchvision = None

FLOAT_DTYPES = [torch.float32, torch.float64]
THRESHOLDS = [0.0, 0.5, 1.0]


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("detection")


def expected_nms(boxes, scores, iou_threshold):
    if torchvision is not None and (boxes.is_cuda or boxes.dtype in FLOAT_DTYPES):
        return torchvision.ops.nms(boxes, scores, iou_threshold).cpu()
    return reference.nms_reference(boxes, scores, iou_threshold).cpu()


def expected_batched_nms(boxes, scores, idxs, iou_threshold):
    # torchvision's batched_nms adds class offsets to the coordinates, which can move an
    # IoU across the threshold; the loop reference compares within each class exactly.
    return reference.batched_nms_reference(boxes.cpu(), scores.cpu(), idxs.cpu(), iou_threshold)


@pytest.mark.parametrize("iou_threshold", THRESHOLDS)
@pytest.mark.parametrize("n", [1, 7, 300, 2000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_matches_torchvision(op, device, dtype, n, iou_threshold):
    boxes = reference.random_boxes(n, device, dtype, extent=400.0)
    scores = torch.rand(n, device=device, dtype=dtype)
    got = op.nms(boxes, scores, iou_threshold)
    assert got.dtype == torch.long and got.device == boxes.device
    assert torch.equal(got.cpu(), expected_nms(boxes, scores, iou_threshold))


@pytest.mark.parametrize("iou_threshold", [0.3, 0.7])
def test_cpu_matches_loop_reference(op, iou_threshold):
    """The CPU kernel compares IoUs with the threshold in double, as the reference does
    (the CUDA kernel, like torchvision's, compares with float(iou_threshold))."""
    boxes = reference.random_boxes(600, "cpu", torch.float32, extent=300.0)
    scores = torch.rand(600)
    got = op.nms(boxes, scores, iou_threshold).cpu()
    assert torch.equal(got, reference.nms_reference(boxes, scores, iou_threshold))


def test_kept_indices_by_decreasing_score_and_no_kept_pair_overlaps(op, device):
    boxes = reference.random_boxes(1500, device, torch.float32, extent=300.0)
    scores = torch.rand(1500, device=device)
    keep = op.nms(boxes, scores, 0.5)
    assert (scores[keep].diff() <= 0).all()
    kept = boxes[keep].double()
    lt = torch.max(kept[:, None, :2], kept[None, :, :2])
    rb = torch.min(kept[:, None, 2:], kept[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    area = (kept[:, 2:] - kept[:, :2]).prod(1)
    iou = inter / (area[:, None] + area[None, :] - inter)
    iou.fill_diagonal_(0)
    assert iou.max() <= 0.5 + 1e-6
    suppressed = torch.ones(len(boxes), dtype=torch.bool, device=device)
    suppressed[keep] = False
    assert suppressed.sum() + len(keep) == len(boxes)


def test_tied_scores_follow_the_sort(op, device):
    boxes = reference.random_boxes(800, device, torch.float32, extent=200.0)
    scores = (torch.rand(800, device=device) * 4).round() / 4  # five distinct values
    got = op.nms(boxes, scores, 0.5).cpu()
    assert torch.equal(got, expected_nms(boxes, scores, 0.5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_16_bit_boxes(op, device, dtype):
    boxes = reference.random_boxes(500, device, torch.float32, extent=300.0).to(dtype)
    scores = torch.rand(500, device=device).to(dtype)
    got = op.nms(boxes, scores, 0.5).cpu()
    if device == "cpu":  # compared in float on the CPU
        want = reference.nms_reference(boxes.float(), scores, 0.5)
    elif torchvision is not None and dtype == torch.float16:
        want = torchvision.ops.nms(boxes, scores, 0.5).cpu()
    else:  # no float16 twin to compare with: check the defining property instead
        want = None
    if want is not None:
        assert torch.equal(got, want)
    else:
        assert (scores[got.to(device)].float().diff() <= 0).all() and len(got) > 0


def test_empty(op, device):
    keep = op.nms(torch.empty(0, 4, device=device), torch.empty(0, device=device), 0.5)
    assert keep.shape == (0,) and keep.dtype == torch.long and keep.device.type == device
    keep = op.batched_nms(torch.empty(0, 4, device=device), torch.empty(0, device=device),
                          torch.empty(0, dtype=torch.long, device=device), 0.5)
    assert keep.shape == (0,) and keep.dtype == torch.long


def test_single_box(op, device):
    boxes = reference.random_boxes(1, device)
    assert op.nms(boxes, torch.rand(1, device=device), 0.5).tolist() == [0]


def test_identical_boxes_keep_the_best(op, device):
    boxes = reference.random_boxes(1, device).repeat(50, 1)
    scores = torch.randperm(50, device=device).float()
    keep = op.nms(boxes, scores, 0.5)
    assert keep.tolist() == [int(scores.argmax())]
    assert len(op.nms(boxes, scores, 1.0)) == 50  # IoU 1 is not above 1


def test_zero_area_boxes_suppress_nothing(op, device):
    """IoU with a zero-area box is 0 (or 0/0 = NaN), never above a threshold >= 0."""
    boxes = reference.random_boxes(200, device)
    boxes[:100, 2] = boxes[:100, 0]  # zero width
    boxes[100:, :] = boxes[100:101, :].clone()
    boxes[100:, 3] = boxes[100:, 1]  # 100 identical zero-height boxes
    scores = torch.rand(200, device=device)
    for threshold in THRESHOLDS:
        keep = op.nms(boxes, scores, threshold)
        assert sorted(keep.tolist()) == list(range(200))
        assert torch.equal(keep.cpu(), expected_nms(boxes, scores, threshold))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_coordinates_as_torchvision(op, device, bad):
    """Documented behaviour: no crash; the same indices as torchvision's kernel for the
    device (the CPU kernel follows std::max, the CUDA kernel fmax)."""
    boxes = reference.random_boxes(300, device, extent=200.0)
    rows = torch.randperm(300)[:30]
    cols = torch.randint(0, 4, (30,))
    boxes[rows, cols] = bad
    scores = torch.rand(300, device=device)
    keep = op.nms(boxes, scores, 0.5)
    assert keep.dtype == torch.long and (keep >= 0).all() and (keep < 300).all()
    assert len(set(keep.tolist())) == len(keep)
    if device == "cpu" or torchvision is not None:
        assert torch.equal(keep.cpu(), expected_nms(boxes, scores, 0.5))


@pytest.mark.parametrize("iou_threshold", [0.3, 0.5])
def test_batched_nms_per_category(op, device, iou_threshold):
    boxes = reference.random_boxes(1200, device, extent=300.0)
    scores = torch.rand(1200, device=device)
    idxs = torch.randint(0, 7, (1200,), device=device)
    got = op.batched_nms(boxes, scores, idxs, iou_threshold).cpu()
    assert torch.equal(got, expected_batched_nms(boxes, scores, idxs, iou_threshold))


def test_batched_nms_categories_never_interact(op, device):
    boxes = reference.random_boxes(1, device).repeat(10, 1)
    scores = torch.rand(10, device=device)
    idxs = torch.arange(10, device=device)
    assert sorted(op.batched_nms(boxes, scores, idxs, 0.5).tolist()) == list(range(10))


def test_torch_compile_data_dependent_length(op):
    boxes = reference.random_boxes(300, extent=200.0)
    scores = torch.rand(300)

    def keep_boxes(b, s):
        return b[op.nms(b, s, 0.5)]

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(keep_boxes, fullgraph=True)
        assert torch.equal(compiled(boxes, scores), keep_boxes(boxes, scores))


def test_bad_inputs(op, device):
    boxes = reference.random_boxes(10, device)
    scores = torch.rand(10, device=device)
    with pytest.raises(RuntimeError, match=r"boxes must be a 2-D tensor, got 1-D"):
        op.nms(boxes.flatten(), scores, 0.5)
    with pytest.raises(RuntimeError, match=r"boxes.size\(1\) must be 4, got 5"):
        op.nms(torch.rand(10, 5, device=device), scores, 0.5)
    with pytest.raises(RuntimeError, match=r"same length, got 10 boxes and 9 scores"):
        op.nms(boxes, scores[:9], 0.5)
    with pytest.raises(RuntimeError, match=r"scores must be a 1-D tensor, got 2-D"):
        op.nms(boxes, scores[:, None], 0.5)
    with pytest.raises(RuntimeError, match=r"boxes must be a floating-point tensor, got Long"):
        op.nms(boxes.long(), scores, 0.5)
    with pytest.raises(RuntimeError, match=r"idxs must be an integer tensor, got Float"):
        op.batched_nms(boxes, scores, scores, 0.5)
    with pytest.raises(RuntimeError, match=r"same length, got 10 boxes and 4 idxs"):
        op.batched_nms(boxes, scores, torch.zeros(4, dtype=torch.long, device=device), 0.5)
    if device == "cuda":
        with pytest.raises(RuntimeError, match=r"scores is on cpu but boxes is on cuda"):
            op.nms(boxes, scores.cpu(), 0.5)


def test_fake_kernels_reject_meta_mixed_with_cpu(op):
    """Named before the data-dependent output length, which would hide the mismatch."""
    boxes = reference.random_boxes(10, "cpu")
    scores = torch.rand(10)
    with pytest.raises(RuntimeError, match=r"detection.nms: scores is on meta but boxes is on cpu"):
        op.nms(boxes, scores.to("meta"), 0.5)
    idxs = torch.zeros(10, dtype=torch.long, device="meta")
    with pytest.raises(RuntimeError,
                       match=r"detection.batched_nms: idxs is on meta but boxes is on cpu"):
        op.batched_nms(boxes, scores, idxs, 0.5)
