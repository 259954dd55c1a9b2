"""The post-processing step of a detector, ours against torchvision end to end.

Synthetic outputs: 2 images, 80 classes, 20k scored boxes per image (800x1088 image),
a 2x256x200x272 feature map (stride 4). Per image: score threshold 0.05, batched NMS per
class at IoU 0.5, the top 100 detections, then ROIAlign (7x7, sampling_ratio 2) of the
kept boxes. The kept boxes of both pipelines must be identical.

    python -m experiments.detection_postprocess
"""

from __future__ import annotations

import os

import torch

import jit_loader
from experiments.benchutil import default_device, environment, format_table, save_json, time_fn

try:
    import torchvision
except ImportError:
    torchvision = None

IMAGES, CLASSES, BOXES = 2, 80, 20000
SCORE_THRESHOLD, IOU_THRESHOLD, TOP_K = 0.05, 0.5, 100


def synthetic_outputs(device):
    xy = torch.rand(IMAGES, BOXES, 2, device=device) * torch.tensor([1088.0, 800.0], device=device)
    wh = torch.rand(IMAGES, BOXES, 2, device=device) * 300 + 8
    boxes = torch.cat([xy, xy + wh], 2)
    scores = torch.rand(IMAGES, BOXES, device=device)
    labels = torch.randint(0, CLASSES, (IMAGES, BOXES), device=device)
    feature = torch.randn(IMAGES, 256, 200, 272, device=device)
    return boxes, scores, labels, feature


def postprocess(batched_nms, roi_align, boxes, scores, labels, feature):
    kept = []
    for image in range(IMAGES):
        candidates = (scores[image] > SCORE_THRESHOLD).nonzero().squeeze(1)
        b, s, l = boxes[image, candidates], scores[image, candidates], labels[image, candidates]
        keep = batched_nms(b, s, l, IOU_THRESHOLD)[:TOP_K]
        kept.append(candidates[keep])
    rois = [boxes[image, k] for image, k in enumerate(kept)]
    return kept, roi_align(feature, rois, 7, spatial_scale=0.25, sampling_ratio=2)


def main() -> None:
    op = jit_loader.load("detection")
    device = default_device()
    env = environment()
    print(f"# detector post-processing, {IMAGES} images x {BOXES} boxes x {CLASSES} classes: "
          f"{env['device']}, torch {env['torch']}, {env['date']}")
    inputs = synthetic_outputs(device)
    ours = lambda: postprocess(op.batched_nms, op.roi_align, *inputs)
    kept, features = ours()
    t_ours = time_fn(ours, device, warmup=3, reps=20)
    row = {"pipeline": "score threshold + batched_nms + top-k + roi_align", "device": device,
           "kept": sum(len(k) for k in kept), "ours_ms": t_ours * 1e3}
    if torchvision is not None:
        theirs = lambda: postprocess(torchvision.ops.batched_nms, torchvision.ops.roi_align, *inputs)
        tv_kept, tv_features = theirs()
        t_tv = time_fn(theirs, device, warmup=3, reps=20)
        identical = all(torch.equal(a, b) for a, b in zip(kept, tv_kept))
        row.update(torchvision_ms=t_tv * 1e3, speedup=t_tv / t_ours, identical_boxes=identical,
                   max_abs_diff=(features - tv_features).abs().max().item() if identical else float("nan"))
    print(format_table([row]))
    out = os.environ.get("OUT_H") or os.environ.get("OUT")
    if out:
        save_json(os.path.join(out, "detection_postprocess.json"), [row])


if __name__ == "__main__":
    main()
