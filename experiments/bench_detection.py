"""Benchmark of the detection ops against torchvision, measured in the same run.

NMS at 1k, 10k and 50k boxes on the GPU and the CPU (kept indices must be identical);
ROIAlign forward and backward on 2 images x 256 channels x 200x272 features, 1000 rois,
7x7 output (sampling_ratio 2, stride-4 feature map), for two roi size mixes.

    python -m experiments.bench_detection            # CPU 50k NMS: one timed run
    python -m experiments.bench_detection --quick    # no 50k on the CPU

Boxes: corners uniform in a 1000x1000 image, sides uniform in [1, 150) (heavy overlap;
the kept count is printed). Rois: corners uniform in the 800x1088 image, sides uniform in
[16, 256) px ("mixed") or [64, 512) px ("large").
"""

from __future__ import annotations

import argparse
import os

import torch

import jit_loader
from experiments import benchutil
from experiments.benchutil import copy_bandwidth, environment, format_table, save_json, time_fn

try:
    import torchvision
except ImportError:
    torchvision = None


def nms_inputs(n: int, device: str):
    xy = torch.rand(n, 2, device=device) * 1000
    wh = torch.rand(n, 2, device=device) * 149 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, device=device)


def bench_nms(op, device: str, sizes, rows: list) -> None:
    for n in sizes:
        boxes, scores = nms_inputs(n, device)
        ours = op.nms(boxes, scores, 0.5)
        slow_cpu = device == "cpu" and n >= 50000
        reps = dict(warmup=0, reps=1) if slow_cpu else dict(warmup=3, reps=10 if device == "cpu" else 30)
        t_ours = time_fn(lambda: op.nms(boxes, scores, 0.5), device, **reps)
        row = {"op": "nms", "device": device, "size": f"{n // 1000}k boxes", "kept": len(ours),
               "ours_ms": t_ours * 1e3}
        if torchvision is not None:
            theirs = torchvision.ops.nms(boxes, scores, 0.5)
            t_tv = time_fn(lambda: torchvision.ops.nms(boxes, scores, 0.5), device, **reps)
            row.update(torchvision_ms=t_tv * 1e3, speedup=t_tv / t_ours,
                       identical=bool(torch.equal(ours, theirs)))
        rows.append(row)
        print(format_table([row]).splitlines()[-1], flush=True)


def roi_inputs(device: str, sizes):
    lo, hi = sizes
    k, height, width, stride = 1000, 200, 272, 4
    feature = torch.randn(2, 256, height, width, device=device)
    xy = torch.rand(k, 2, device=device) * torch.tensor([width * stride, height * stride], device=device)
    wh = torch.rand(k, 2, device=device) * (hi - lo) + lo
    index = torch.randint(0, 2, (k, 1), device=device).float()
    return feature, torch.cat([index, xy, xy + wh], 1)


def bench_roi_align(op, device: str, rows: list) -> None:
    params = dict(spatial_scale=0.25, sampling_ratio=2, aligned=False)
    for mix, sizes in (("mixed", (16, 256)), ("large", (64, 512))):
        feature, rois = roi_inputs(device, sizes)
        out = op.roi_align(feature, rois, 7, **params)
        grad = torch.randn_like(out)
        shape = (2, 256, 200, 272)
        ours_bwd = lambda: torch.ops.detection.roi_align_backward(grad, rois, 0.25, 7, 7, *shape, 2, False)
        reps = dict(warmup=5, reps=50) if device == "cuda" else dict(warmup=1, reps=3)
        t_f = time_fn(lambda: op.roi_align(feature, rois, 7, **params), device, **reps)
        t_b = time_fn(ours_bwd, device, **reps)
        fwd = {"op": "roi_align forward", "device": device, "size": f"1000 rois, {mix}", "ours_ms": t_f * 1e3}
        bwd = {"op": "roi_align backward", "device": device, "size": f"1000 rois, {mix}", "ours_ms": t_b * 1e3}
        if torchvision is not None:
            tv_bwd = lambda: torch.ops.torchvision._roi_align_backward(grad, rois, 0.25, 7, 7, *shape, 2, False)
            t_tf = time_fn(lambda: torchvision.ops.roi_align(feature, rois, 7, **params), device, **reps)
            t_tb = time_fn(tv_bwd, device, **reps)
            want = torchvision.ops.roi_align(feature, rois, 7, **params)
            gi, tv_gi = ours_bwd(), tv_bwd()
            fwd.update(torchvision_ms=t_tf * 1e3, speedup=t_tf / t_f,
                       max_abs_diff=(out - want).abs().max().item())
            bwd.update(torchvision_ms=t_tb * 1e3, speedup=t_tb / t_b,
                       max_abs_diff=(gi - tv_gi).abs().max().item())
        for row in (fwd, bwd):
            rows.append(row)
            print(format_table([row]).splitlines()[-1], flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip NMS of 50k boxes on the CPU")
    parser.add_argument("--only", choices=("nms", "roi_align"), help="run one op's section")
    args = parser.parse_args(argv)
    op = jit_loader.load("detection")
    env = environment()
    print(f"# detection ops vs torchvision {torchvision.__version__ if torchvision else '(not installed)'}: "
          f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, {env['date']}, "
          f"{env['threads']} CPU threads")
    rows: list = []
    if torch.cuda.is_available():
        print(f"# copy ceiling (clone of 64M floats): {copy_bandwidth(1 << 26):.0f} GB/s")
    if args.only in (None, "nms"):
        if torch.cuda.is_available():
            bench_nms(op, "cuda", (1000, 10000, 50000), rows)
        bench_nms(op, "cpu", (1000, 10000) if args.quick else (1000, 10000, 50000), rows)
    if args.only in (None, "roi_align"):
        bench_roi_align(op, "cuda" if torch.cuda.is_available() else "cpu", rows)
    columns = ["op", "device", "size", "kept", "ours_ms", "torchvision_ms", "speedup", "identical",
               "max_abs_diff"]
    print()
    print(format_table(rows, columns))
    out = os.environ.get("OUT_H") or os.environ.get("OUT")
    if out:
        save_json(os.path.join(out, "bench_detection.json"), rows)


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
        images, channels, height, width, k = shape
        # roi_inputs's boxes, for any feature map size and roi count (stride 4).
        sides = {"mixed": (16, 256), "large": (64, 512)}[mix]
        stride = 4
        feature = torch.randn(images, channels, height, width, device=device)
        xy = torch.rand(k, 2, device=device) * torch.tensor([width * stride, height * stride],
                                                             device=device)
        wh = torch.rand(k, 2, device=device) * (sides[1] - sides[0]) + sides[0]
        index = torch.randint(0, images, (k, 1), device=device).float()
        rois = torch.cat([index, xy, xy + wh], 1)
        params = dict(spatial_scale=1 / stride, sampling_ratio=2, aligned=False)
        out = op.roi_align(feature, rois, 7, **params)
        torch.testing.assert_close(out, torchvision.ops.roi_align(feature, rois, 7, **params),
                                   atol=1e-4, rtol=1e-4)
        if direction == "forward":
            return {"ours": lambda: op.roi_align(feature, rois, 7, **params),
                    SUITE_TV: lambda: torchvision.ops.roi_align(feature, rois, 7, **params)}
        grad = torch.randn_like(out)
        args = (grad, rois, 1 / stride, 7, 7, images, channels, height, width, 2, False)
        ours = lambda: torch.ops.detection.roi_align_backward(*args)  # noqa: E731
        theirs = lambda: torch.ops.torchvision._roi_align_backward(*args)  # noqa: E731
        torch.testing.assert_close(ours(), theirs(), atol=1e-4, rtol=1e-4)
        return {"ours": ours, SUITE_TV: theirs}
    return build


if __name__ == "__main__":
    main()
