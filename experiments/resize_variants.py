"""Resize kernel variants, timed against each other and ATen in one run (L2 flushed).

The launchers read RESIZE_* environment variables while variants are being compared:
RESIZE_FWD (0: column kernels, 1: tiles, 2: tiles up to 2 source rows per output row),
RESIZE_BWD (0: column kernels, 1: tiles, 3: NCHW row-order tiles, else tiles),
RESIZE_*_ROWS / RESIZE_ROWS_MAX (rows per tile), RESIZE_*_CAP, RESIZE_*_MINB.

    python -m experiments.resize_variants
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

import jit_loader
from experiments import benchutil

CASES = [
    ("2x up", (8, 64, 128, 128), (256, 256), torch.float32, "nchw"),
    ("2x up", (8, 64, 128, 128), (256, 256), torch.float32, "channels_last"),
    ("2x up", (8, 64, 128, 128), (256, 256), torch.bfloat16, "nchw"),
    ("1.5x up", (8, 64, 128, 128), (192, 192), torch.float32, "nchw"),
    ("1.5x up", (8, 64, 128, 128), (192, 192), torch.float32, "channels_last"),
    ("7:3 down", (8, 64, 224, 224), (96, 96), torch.float32, "nchw"),
    ("7:3 down", (8, 64, 224, 224), (96, 96), torch.float32, "channels_last"),
    ("2x down", (8, 64, 256, 256), (128, 128), torch.float32, "nchw"),
]

FWD = {
    "old": {"RESIZE_FWD": "0"},
    "default": {},
    "tile all": {"RESIZE_FWD": "1"},
    "tile r128": {"RESIZE_FWD": "1", "RESIZE_FWD_ROWS": "128"},
    "tile minb1": {"RESIZE_FWD": "1", "RESIZE_FWD_MINB": "1"},
    "tile minb8": {"RESIZE_FWD": "1", "RESIZE_FWD_MINB": "8"},
}
BWD = {
    "old": {"RESIZE_BWD": "0"},
    "default": {},
    "tile": {"RESIZE_BWD": "1"},
    "rows r8": {"RESIZE_BWD": "3", "RESIZE_ROWS_MAX": "8"},
    "rows r16": {"RESIZE_BWD": "3", "RESIZE_ROWS_MAX": "16"},
    "rows r32": {"RESIZE_BWD": "3", "RESIZE_ROWS_MAX": "32"},
}
KEYS = ["RESIZE_FWD", "RESIZE_BWD", "RESIZE_FWD_ROWS", "RESIZE_BWD_ROWS", "RESIZE_FWD_CAP", "RESIZE_BWD_CAP",
        "RESIZE_FWD_MINB", "RESIZE_BWD_MINB", "RESIZE_ROWS_MAX", "RESIZE_MIN_LEN"]


def with_env(env, fn):
    def call():
        for k in KEYS:
            os.environ.pop(k, None)
        os.environ.update(env)
        return fn()
    return call


def main():
    jit_loader.load("resize")
    dev = "cuda"
    rows = []
    for name, shape, size, dtype, layout in CASES:
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        x = torch.randn(shape, device=dev).to(dtype).contiguous(memory_format=fmt)
        grad = torch.randn(*shape[:2], *size, device=dev).to(dtype).contiguous(memory_format=fmt)
        nbytes = (x.numel() + grad.numel()) * x.element_size()
        want_f = F.interpolate(x.float(), size=size, mode="bilinear", align_corners=False)
        want_b = torch.ops.aten.upsample_bilinear2d_backward(grad.float(), list(size), list(shape), False, None, None)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        fwd = {"ATen": lambda: F.interpolate(x, size=size, mode="bilinear", align_corners=False)}
        bwd = {"ATen": lambda: torch.ops.aten.upsample_bilinear2d_backward(grad, list(size), list(shape), False, None, None)}
        for v, env in FWD.items():
            f = with_env(env, lambda: torch.ops.resize.forward(x, list(size), "half_pixel", None))
            torch.testing.assert_close(f().float(), want_f, atol=tol, rtol=tol)
            fwd[v] = f
        for v, env in BWD.items():
            f = with_env(env, lambda: torch.ops.resize.backward(grad, list(shape), "half_pixel", None))
            got = f()
            torch.testing.assert_close(got.float(), want_b, atol=tol, rtol=tol)
            assert torch.equal(got, f()), v
            bwd[v] = f
        for direction, fns in (("forward", fwd), ("backward", bwd)):
            t = benchutil.measure(fns, dev, warmup=3, reps=40, flush=True)
            aten = t["ATen"].median
            for v, tm in t.items():
                rows.append({"case": name, "dtype": str(dtype).removeprefix("torch."), "layout": layout,
                             "pass": direction, "impl": v, "us": tm.median * 1e6,
                             "GB/s": benchutil.gbps(nbytes, tm.median), "x ATen": aten / tm.median})
        del x, grad
    for k in KEYS:
        os.environ.pop(k, None)
    env = benchutil.environment()
    print(f"# resize_variants: {env['device']}, torch {env['torch']}, {env['date']}")
    print(benchutil.format_table(rows, ["case", "dtype", "layout", "pass", "impl", "us", "GB/s", "x ATen"]))


if __name__ == "__main__":
    main()
