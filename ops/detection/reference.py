"""Plain-PyTorch references for the detection ops, written for clarity (loops are fine).

They follow torchvision's CPU semantics step by step, so that tests can check exact kept
indices where torchvision is not installed. Importing this module builds nothing.
"""

from __future__ import annotations

import math
from typing import List

import torch
from torch import Tensor

# ROIAlign agreement with the float64 reference, per input dtype (16-bit: computed in
# float from 16-bit inputs, rounded once; the backward adds many such terms).
TOLERANCES = {
    torch.float64: dict(atol=1e-10, rtol=1e-8),
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float16: dict(atol=2e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=1e-1, rtol=4e-2),
}


def _first_max(a: Tensor, b: Tensor) -> Tensor:
    """std::max(a, b) as torchvision's CPU kernel applies it: ``a`` unless ``a < b``."""
    return torch.where(a < b, b, a)


def _first_min(a: Tensor, b: Tensor) -> Tensor:
    return torch.where(b < a, b, a)


def nms_reference(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy NMS: visit boxes by decreasing score; keep a box unless a kept box overlaps it
    with IoU > iou_threshold. IoU is computed in the boxes' dtype, compared in double."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    boxes = boxes.cpu()
    if boxes.dtype not in (torch.float32, torch.float64):
        boxes = boxes.float()
    order = torch.sort(scores.cpu(), stable=True, dim=0, descending=True)[1]
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(len(boxes), dtype=torch.bool)
    keep: List[int] = []
    zero = torch.zeros((), dtype=boxes.dtype)
    for pos in range(len(order)):
        i = int(order[pos])
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[pos + 1:]
        xx1 = _first_max(x1[i], x1[rest])
        yy1 = _first_max(y1[i], y1[rest])
        xx2 = _first_min(x2[i], x2[rest])
        yy2 = _first_min(y2[i], y2[rest])
        w = _first_max(zero, xx2 - xx1)
        h = _first_max(zero, yy2 - yy1)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[rest] |= iou.double() > iou_threshold
    return torch.tensor(keep, dtype=torch.long, device=scores.device)


def batched_nms_reference(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """NMS separately within each category; the kept boxes of all categories together, in
    the order of the scores' descending sort."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    kept = torch.zeros(len(boxes), dtype=torch.bool)
    for category in idxs.unique():
        members = (idxs == category).nonzero().flatten().cpu()
        local = nms_reference(boxes[members], scores[members], iou_threshold).cpu()
        kept[members[local]] = True
    order = torch.sort(scores.cpu(), stable=True, dim=0, descending=True)[1]
    return order[kept[order]].to(scores.device)


def max_adaptive_grid(size: int) -> int:
    """The most samples per bin along an axis of ``size`` pixels when sampling_ratio <= 0:
    samples count on [-1, size], so a longer bin is larger than the whole map. Up to this,
    torchvision's ceil(bin); beyond it (a diverged box) fewer, evenly spaced samples of the
    same bin, so one roi cannot take unbounded time and memory (detection.h)."""
    return size + 2


def _axis(lo: float, hi: float, scale: float, pooled: int, sampling_ratio: int, aligned: bool,
          size: int):
    offset = 0.5 if aligned else 0.0
    start = lo * scale - offset
    length = hi * scale - offset - start
    if not aligned:
        length = max(length, 1.0)
    bin_size = length / pooled
    if sampling_ratio > 0:
        grid = sampling_ratio
    else:
        grid = (min(math.ceil(bin_size), max_adaptive_grid(size))
                if math.isfinite(bin_size) and bin_size > 0 else 0)
    return start, bin_size, grid


def _axis_weights(y: float, size: int):
    """Neighbours and weights of a sample on one axis; None when it counts zero."""
    if not (-1.0 <= y <= size):
        return None
    y = max(y, 0.0)
    low = int(y)
    if low >= size - 1:
        low = high = size - 1
        y = float(low)
    else:
        high = low + 1
    frac = y - low
    return low, high, 1.0 - frac, frac


def roi_align_reference(input: Tensor, rois: Tensor, output_size, spatial_scale: float = 1.0,
                        sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """ROIAlign in float64, differentiable in ``input`` through plain indexing.

    Each output bin averages grid x grid bilinear samples; a sample more than one pixel
    outside the map (or at a non-finite position) counts zero, others are clamped.
    """
    pooled_h, pooled_w = (output_size, output_size) if isinstance(output_size, int) else output_size
    x = input.double()
    channels, height, width = x.shape[1:]
    out = []
    for roi in rois.double().cpu().tolist():
        batch, x1, y1, x2, y2 = roi
        start_y, bin_y, grid_y = _axis(y1, y2, spatial_scale, pooled_h, sampling_ratio, aligned, height)
        start_x, bin_x, grid_x = _axis(x1, x2, spatial_scale, pooled_w, sampling_ratio, aligned, width)
        count = max(grid_y * grid_x, 1)
        feature = x[int(batch)]
        bins = []
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                acc = torch.zeros(channels, dtype=torch.float64, device=x.device)
                for iy in range(grid_y):
                    yw = _axis_weights(start_y + ph * bin_y + (iy + 0.5) * bin_y / grid_y, height)
                    if yw is None:
                        continue
                    for ix in range(grid_x):
                        xw = _axis_weights(start_x + pw * bin_x + (ix + 0.5) * bin_x / grid_x, width)
                        if xw is None:
                            continue
                        y0, y1_, wy0, wy1 = yw
                        x0, x1_, wx0, wx1 = xw
                        acc = acc + (wy0 * wx0 * feature[:, y0, x0] + wy0 * wx1 * feature[:, y0, x1_]
                                     + wy1 * wx0 * feature[:, y1_, x0] + wy1 * wx1 * feature[:, y1_, x1_])
                bins.append(acc / count)
        out.append(torch.stack(bins, 1).reshape(channels, pooled_h, pooled_w) if bins else
                   x.new_zeros(channels, pooled_h, pooled_w))
    if not out:  # no rois: empty, yet taken from x, so that its gradient is zeros
        return x.flatten()[:0].reshape(0, channels, pooled_h, pooled_w)
    return torch.stack(out)


def random_boxes(n: int, device="cpu", dtype=torch.float32, extent: float = 1000.0,
                 max_size: float = 150.0) -> Tensor:
    """Fresh random ``(n, 4)`` boxes ``x1, y1, x2, y2`` of many sizes and overlaps."""
    xy = torch.rand(n, 2, device=device, dtype=torch.float64) * extent
    wh = torch.rand(n, 2, device=device, dtype=torch.float64) * max_size
    return torch.cat([xy, xy + wh], 1).to(dtype)


def random_rois(k: int, batch: int, height: int, width: int, spatial_scale: float = 1.0,
                device="cpu", dtype=torch.float32) -> Tensor:
    """Fresh random ``(k, 5)`` rois over a ``height x width`` map (in input coordinates),
    including ones that reach past its border."""
    h, w = height / spatial_scale, width / spatial_scale
    x1 = torch.rand(k, dtype=torch.float64) * w * 1.1 - 0.05 * w
    y1 = torch.rand(k, dtype=torch.float64) * h * 1.1 - 0.05 * h
    x2 = x1 + torch.rand(k, dtype=torch.float64) * w * 0.6
    y2 = y1 + torch.rand(k, dtype=torch.float64) * h * 0.6
    index = torch.randint(0, batch, (k,)).double()
    return torch.stack([index, x1, y1, x2, y2], 1).to(device=device, dtype=dtype)


def example_inputs(device="cpu", dtype=torch.float32):
    """(boxes, scores) for NMS and (input, rois) for ROIAlign, fresh and random."""
    boxes = random_boxes(500, device, dtype)
    scores = torch.rand(500, device=device, dtype=dtype)
    feature = torch.randn(2, 8, 24, 32, device=device, dtype=dtype).requires_grad_()
    rois = random_rois(12, 2, 24, 32, spatial_scale=0.5, device=device, dtype=dtype)
    return boxes, scores, feature, rois


def check_cases(device="cpu") -> dict[str, dict]:
    """What every check of the ops runs (``jit_loader.check_op``; the op tester makes a
    test of each): NMS and batched NMS (exact kept indices), none kept of no boxes; ROIAlign
    forward and backward against the references on fresh random inputs, in float32 and
    float64, within TOLERANCES: fixed and adaptive sampling in both pixel conventions (every
    sampling grid gradchecked), no rois, no channels. Each case is jit_loader.check's
    arguments, ``fn`` naming the surface function."""
    f64 = dict(device=device, dtype=torch.float64)
    boxes, scores = random_boxes(300, **f64), torch.rand(300, **f64)
    idxs = torch.randint(0, 3, (300,), device=device)
    no_boxes, no_scores = torch.empty(0, 4, **f64), torch.empty(0, **f64)

    def feature(channels=3):  # a small map: gradcheck calls the op twice per element
        return torch.randn(2, channels, 10, 12, **f64).requires_grad_()

    def roi_align(inputs, full=True):
        # The sampling grid alone changes between the grid's cases: their opcheck and
        # compile would repeat the first cases'.
        light = {} if full else dict(opcheck=False, compile_backend=None)
        return dict(fn="roi_align", inputs=inputs, reference=roi_align_reference, **light)

    rois = lambda k, scale=1.0: random_rois(k, 2, 10, 12, spatial_scale=scale, **f64)
    cases = {
        "nms": dict(fn="nms", inputs=(boxes, scores, 0.5), reference=nms_reference),
        "batched_nms": dict(fn="batched_nms", inputs=(boxes, scores, idxs, 0.5),
                            reference=batched_nms_reference),
        "nms no boxes": dict(fn="nms", inputs=(no_boxes, no_scores, 0.5), reference=nms_reference),
        "batched_nms no boxes": dict(fn="batched_nms", reference=batched_nms_reference,
                                     inputs=(no_boxes, no_scores, idxs[:0], 0.5)),
        "roi_align": roi_align((feature(), rois(6, 0.5), (3, 2), 0.5, 2, False)),
        "roi_align aligned adaptive": roi_align((feature(), rois(5), 2, 1.0, -1, True)),
        "roi_align no rois": roi_align((feature(), rois(0), 3)),
        "roi_align no channels": roi_align((feature(0), rois(4), 3)),
    }
    for sampling_ratio in (-1, 1, 2, 4):
        for aligned in (False, True):
            cases[f"roi_align grid {sampling_ratio} aligned={aligned}"] = roi_align(
                (feature(2), rois(4, 0.5), (2, 3), 0.5, sampling_ratio, aligned), full=False)
    return cases
