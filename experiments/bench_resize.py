"""Bilinear resize: forward and backward time and GB/s of the resize op against ATen
(``F.interpolate(mode="bilinear")`` and ``aten.upsample_bilinear2d_backward``).

Each case is timed in the same run as its baselines: ``clone()`` of the larger tensor
(the copy ceiling, column ``% clone``), ATen with the same memory format and pixel
convention (asymmetric has no ATen twin, so its row is compared with ATen's half-pixel
time: every mode should run at half-pixel speed), and, for the headline case,
``torch.compile`` of F.interpolate. Bytes counted are the ideal traffic: forward reads the
input and writes the output, backward reads grad_output and writes grad_input. Before
timing, every case is checked against ATen (and our backward for bitwise repeatability).

    python -m experiments.bench_resize [--quick] [--no-compile] [--json out.json]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import jit_loader
from experiments import benchutil

COLUMNS = ["case", "dtype", "layout", "mode", "pass", "impl", "us", "GB/s", "% clone", "x ATen"]

# (name, input shape, output size, coordinate modes, dtypes, layouts)
CASES = [
    ("2x up", (8, 64, 128, 128), (256, 256), ("half_pixel", "align_corners", "asymmetric"),
     (torch.float32, torch.bfloat16), ("nchw", "channels_last")),
    ("1.5x up", (8, 64, 128, 128), (192, 192), ("half_pixel",), (torch.float32,), ("nchw", "channels_last")),
    ("7:3 down", (8, 64, 224, 224), (96, 96), ("half_pixel",), (torch.float32,), ("nchw", "channels_last")),
    ("2x down", (8, 64, 256, 256), (128, 128), ("half_pixel", "asymmetric"), (torch.float32, torch.bfloat16),
     ("nchw",)),
]
QUICK_CASES = [("2x up", (2, 16, 64, 64), (128, 128), ("half_pixel",), (torch.float32,), ("nchw",))]


def aten_forward(x, size, mode):
    return F.interpolate(x, size=size, mode="bilinear", align_corners=mode == "align_corners")


def aten_backward(grad, input_size, mode):
    return torch.ops.aten.upsample_bilinear2d_backward(
        grad, list(grad.shape[2:]), list(input_size), mode == "align_corners", None, None)


def _check(x, size, mode, grad):
    """Fail loudly rather than report the speed of a wrong or nondeterministic answer."""
    ours = torch.ops.resize.forward(x, list(size), mode, None)
    ours_back = torch.ops.resize.backward(grad, list(x.shape), mode, None)
    assert torch.equal(ours_back, torch.ops.resize.backward(grad, list(x.shape), mode, None)), "backward not repeatable"
    assert ours.is_contiguous(memory_format=torch.channels_last) == x.is_contiguous(memory_format=torch.channels_last)
    if mode == "asymmetric":
        return
    tol = {torch.float32: 1e-4, torch.bfloat16: 3e-2}[x.dtype]
    torch.testing.assert_close(ours.float(), aten_forward(x.float(), size, mode), atol=tol, rtol=tol)
    torch.testing.assert_close(ours_back.float(), aten_backward(grad.float(), x.shape, mode), atol=tol, rtol=tol)


def run(device=None, quick: bool = False, compile_baseline: bool = True) -> list[dict]:
    device = torch.device(device or benchutil.default_device())
    on_gpu = device.type == "cuda"
    jit_loader.load("resize")
    reps = 50 if on_gpu else 5

    def measure(fn):
        return benchutil.time_fn(fn, device, warmup=5 if on_gpu else 1, reps=reps)

    rows = []
    for name, shape, size, modes, dtypes, layouts in (QUICK_CASES if quick else CASES):
        for dtype in dtypes:
            for layout in layouts:
                fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
                x = torch.randn(shape, device=device).to(dtype).contiguous(memory_format=fmt)
                grad = torch.randn(*shape[:2], *size, device=device).to(dtype).contiguous(memory_format=fmt)
                big = max(x.numel(), grad.numel())
                clone_src = torch.randn(big, device=device).to(dtype)
                clone_gbps = benchutil.gbps(2 * big * x.element_size(), measure(lambda: clone_src.clone()))
                nbytes = (x.numel() + grad.numel()) * x.element_size()
                label = str(dtype).removeprefix("torch.")
                aten = {
                    "forward": measure(lambda: aten_forward(x, size, "half_pixel")),
                    "backward": measure(lambda: aten_backward(grad, x.shape, "half_pixel")),
                }
                for mode in modes:
                    _check(x, size, mode, grad)
                    if mode == "align_corners":
                        aten = {"forward": measure(lambda: aten_forward(x, size, mode)),
                                "backward": measure(lambda: aten_backward(grad, x.shape, mode))}
                    ours = {
                        "forward": measure(lambda: torch.ops.resize.forward(x, list(size), mode, None)),
                        "backward": measure(lambda: torch.ops.resize.backward(grad, list(x.shape), mode, None)),
                    }
                    timings = {p: {"ours": ours[p], "ATen": aten[p]} for p in ours}
                    if compile_baseline and on_gpu and name == "2x up" and dtype == torch.float32 \
                            and layout == "nchw" and mode == "half_pixel":
                        torch.compiler.reset()
                        fwd = torch.compile(lambda t: aten_forward(t, size, mode), fullgraph=True, dynamic=False)
                        xr = x.detach().clone().requires_grad_()
                        fb = torch.compile(lambda t, g: torch.autograd.grad(aten_forward(t, size, mode), t, g),
                                           dynamic=False)
                        timings["forward"]["compiled"] = measure(lambda: fwd(x))
                        timings["backward"]["compiled (fwd+bwd)"] = measure(lambda: fb(xr, grad))
                    for direction, impls in timings.items():
                        for impl, seconds in impls.items():
                            rate = benchutil.gbps(nbytes, seconds)
                            row = {"case": name, "dtype": label, "layout": layout, "mode": mode,
                                   "pass": direction, "impl": impl, "us": seconds * 1e6, "GB/s": rate,
                                   "% clone": 100 * rate / clone_gbps}
                            if impl == "ours":
                                row["x ATen"] = impls["ATen"] / seconds
                            rows.append(row)
                del x, grad, clone_src
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when visible)")
    parser.add_argument("--quick", action="store_true", help="one small case")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows here")
    args = parser.parse_args(argv)
    device = args.device or benchutil.default_device()
    rows = run(device, quick=args.quick, compile_baseline=not args.no_compile)
    env = benchutil.environment()
    print(f"# bench_resize: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), {env['date']}")
    print("# ATen of an asymmetric row: ATen's half_pixel time (ATen has no asymmetric mode)")
    print(benchutil.format_table(rows, COLUMNS))
    if args.json:
        benchutil.save_json(args.json, rows, quick=args.quick)


if __name__ == "__main__":
    main()
