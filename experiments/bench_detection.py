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


if __name__ == "__main__":
    main()
