"""Benchmark of the detection ops against torchvision, measured in the same run.

The suite's nms and roi_align cases (``suite_cases``), printed as one table. NMS at 1k,
10k and 50k boxes on the device and, in a GPU run, 1k and 10k on the CPU as well (kept
indices must be identical to torchvision's); ROIAlign forward and backward on 2 images x
256 channels x 200x272 features, 1000 rois, 7x7 output (sampling_ratio 2, stride-4
feature map), for two roi size mixes (answers must agree with torchvision's).

    python -m experiments.bench_detection            # CPU: 50k NMS takes torchvision seconds a call
    python -m experiments.bench_detection --quick    # 1k and 10k boxes, 250 rois, 64 channels
    python -m experiments.bench_detection --only nms --json $OUT/bench_detection.json

Boxes: corners uniform in a 1000x1000 image, sides uniform in [1, 150) (heavy overlap).
Rois: corners uniform in the image the stride-4 feature map covers (800x1088 at full
size), sides uniform in [16, 256) px ("mixed") or [64, 512) px ("large").
"""

from __future__ import annotations

import sys

import torch

import jit_loader
from experiments import benchutil

try:
    import torchvision
except ImportError:
    torchvision = None


def nms_inputs(n: int, device: str):
    xy = torch.rand(n, 2, device=device) * 1000
    wh = torch.rand(n, 2, device=device) * 149 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, device=device)


ROI_SIDES = {"mixed": (16, 256), "large": (64, 512)}
ROI_STRIDE = 4


def roi_inputs(device: str, shape, mix: str):
    """Features [images, channels, height, width] and ``rois`` boxes of the ``mix`` sides
    on the stride-4 image they cover; ``shape`` is (images, channels, height, width, rois)."""
    images, channels, height, width, k = shape
    lo, hi = ROI_SIDES[mix]
    feature = torch.randn(images, channels, height, width, device=device)
    xy = torch.rand(k, 2, device=device) * torch.tensor(
        [width * ROI_STRIDE, height * ROI_STRIDE], device=device)
    wh = torch.rand(k, 2, device=device) * (hi - lo) + lo
    index = torch.randint(0, images, (k, 1), device=device).float()
    return feature, torch.cat([index, xy, xy + wh], 1)


def main(argv=None) -> int:
    from experiments import suite

    parser = suite.view_parser(__doc__)
    parser.add_argument("--only", choices=("nms", "roi_align"), help="one op's cases")
    args = parser.parse_args(argv)
    return suite.run_view(args, suite_cases, "detection", [args.only] if args.only else None)


# ------------------------------------------------------------------------ the suite's cases

# NMS sizes (boxes) per scale: on the suite's device, and on the CPU (a GPU run adds the
# CPU's; 50k boxes on a CPU take torchvision seconds per call, so the suite leaves it out).
SUITE_NMS = {"tiny": (256, 1024), "quick": (1000, 10000), "full": (1000, 10000, 50000)}
SUITE_NMS_CPU = {"tiny": (256, 1024), "quick": (1000, 10000), "full": (1000, 10000)}
# Issue 15's targets: NMS on a GPU 2x torchvision at 10k boxes, 5x at 50k; on a CPU 2x at
# 10k; ROIAlign (on a GPU, at the issue's shape) forward 1x, backward 1.5x.
SUITE_NMS_TARGETS = {("cuda", 10000): 2.0, ("cuda", 50000): 5.0, ("cpu", 10000): 2.0}
SUITE_ROI_TARGETS = {"forward": 1.0, "backward": 1.5}
# ROIAlign (images, channels, height, width, rois) per scale; full is the issue's.
SUITE_ROI = {"tiny": (2, 8, 25, 34, 32), "quick": (2, 64, 200, 272, 250),
             "full": (2, 256, 200, 272, 1000)}
SUITE_TV = "torchvision"
# Shown beside a missed ROIAlign backward target: the two backward passes differ in kind.
SUITE_ROI_BACKWARD_NOTE = ("ours is deterministic (each input pixel gathers its terms, no "
                           "atomics); torchvision's backward adds them with atomics")


def suite_cases(device: str, scale: str) -> list[benchutil.Case | benchutil.Skipped]:
    """NMS and ROIAlign against torchvision, for the suite (experiments/bench.py).

    NMS (op ``nms``, IoU 0.5, the boxes of ``nms_inputs``) on the suite's device and, in a
    GPU run, on the CPU as well; kept indices must equal torchvision's. ROIAlign (op
    ``roi_align``, 7x7 output, spatial scale 1/4, sampling ratio 2, the "mixed" and
    "large" rois of ``roi_inputs``) forward and backward; answers must agree with
    torchvision's. Targets as issue 15 states them (ROIAlign's at its shape on a GPU).
    Without torchvision every case is returned as ``benchutil.Skipped`` with the reason."""
    on_gpu = torch.device(device).type == "cuda"
    roi_shape = SUITE_ROI[scale]
    nms_runs = [(device, n) for n in SUITE_NMS[scale]]
    if on_gpu:
        nms_runs += [("cpu", n) for n in SUITE_NMS_CPU[scale]]
    roi_runs = [(mix, direction) for mix in ("mixed", "large") for direction in ("forward", "backward")]
    if torchvision is None:
        reason = ("torchvision is not importable, and it is the baseline of every case "
                  "(pip install torchvision, the build matching torch)")
        return ([benchutil.Skipped("nms", f"{n} boxes on {d}", reason) for d, n in nms_runs]
                + [benchutil.Skipped("roi_align", f"{p} {m} rois", reason) for m, p in roi_runs])
    cases = []
    for dev, n in nms_runs:
        target = SUITE_NMS_TARGETS.get((torch.device(dev).type, n))
        cases.append(benchutil.Case(
            op="nms", pass_="forward", shape=f"{n} boxes" + (" on cpu" if dev != device else ""),
            dtype="float32", build=_suite_nms(dev, n), targets={SUITE_TV: target} if target else {},
            host_bound=True, device=dev if dev != device else None))
    images, channels, height, width, rois = roi_shape
    issue_shape = on_gpu and scale == "full"
    for mix, direction in roi_runs:
        cases.append(benchutil.Case(
            op="roi_align", pass_=direction,
            shape=f"{images}x{channels}x{height}x{width}, {rois} {mix} rois -> 7x7",
            dtype="float32", build=_suite_roi(device, roi_shape, mix, direction),
            targets={SUITE_TV: SUITE_ROI_TARGETS[direction]} if issue_shape else {},
            reasons={SUITE_TV: SUITE_ROI_BACKWARD_NOTE} if direction == "backward" else {}))
    return cases


def _suite_nms(device, n):
    def build():
        op = jit_loader.load("detection")
        boxes, scores = nms_inputs(n, device)
        ours, theirs = op.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5)
        if not torch.equal(ours, theirs):  # fail loudly rather than time a wrong answer
            raise AssertionError(f"nms of {n} boxes on {device}: kept {len(ours)} boxes, "
                                 f"torchvision {len(theirs)}, indices differ")
        return {"ours": lambda: op.nms(boxes, scores, 0.5),
                SUITE_TV: lambda: torchvision.ops.nms(boxes, scores, 0.5)}
    return build


def _suite_roi(device, shape, mix, direction):
    def build():
        op = jit_loader.load("detection")
        images, channels, height, width, _ = shape
        feature, rois = roi_inputs(device, shape, mix)
        params = dict(spatial_scale=1 / ROI_STRIDE, sampling_ratio=2, aligned=False)
        out = op.roi_align(feature, rois, 7, **params)
        torch.testing.assert_close(out, torchvision.ops.roi_align(feature, rois, 7, **params),
                                   atol=1e-4, rtol=1e-4)
        if direction == "forward":
            return {"ours": lambda: op.roi_align(feature, rois, 7, **params),
                    SUITE_TV: lambda: torchvision.ops.roi_align(feature, rois, 7, **params)}
        grad = torch.randn_like(out)
        args = (grad, rois, 1 / ROI_STRIDE, 7, 7, images, channels, height, width, 2, False)
        ours = lambda: torch.ops.detection.roi_align_backward(*args)  # noqa: E731
        theirs = lambda: torch.ops.torchvision._roi_align_backward(*args)  # noqa: E731
        torch.testing.assert_close(ours(), theirs(), atol=1e-4, rtol=1e-4)
        return {"ours": ours, SUITE_TV: theirs}
    return build


if __name__ == "__main__":
    sys.exit(main())
