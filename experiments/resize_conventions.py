"""What the pixel-convention deployment bug looks like: one image resized under each
coordinate mode of the resize op, and the difference maps against PyTorch's default.

A model trained on images resized with PyTorch (half_pixel) and deployed on a
TensorFlow 1.x runtime (asymmetric) sees every resized image shifted by half an input
pixel minus half an output pixel, and its right and bottom edges smeared: the maps show
where, and the printed figures how much. Saves experiments/out/resize_conventions.png.

    python -m experiments.resize_conventions [--scale 3] [--out PATH] [--device cpu]
"""

from __future__ import annotations

import argparse
import os

import torch

import jit_loader

MODES = ("half_pixel", "align_corners", "asymmetric")
LABELS = {"half_pixel": "PyTorch (half_pixel)", "align_corners": "align_corners=True",
          "asymmetric": "TensorFlow 1.x (asymmetric)"}


def test_image(size: int = 40) -> torch.Tensor:
    """A grey-level test card with sharp edges at every scale: a checkerboard, a disc, a
    thin diagonal line, values in [0, 1], shape (1, 1, size, size)."""
    y, x = torch.meshgrid(torch.arange(size, dtype=torch.float64),
                          torch.arange(size, dtype=torch.float64), indexing="ij")
    img = (((y // 5) + (x // 5)) % 2) * 0.35
    img = torch.where((y - 0.62 * size) ** 2 + (x - 0.3 * size) ** 2 < (0.18 * size) ** 2, 0.9, img)
    img = torch.where((y - x).abs() < 0.8, 1.0, img)
    return img[None, None]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=3.0, help="upscaling factor (default 3)")
    parser.add_argument("--size", type=int, default=40, help="test image side in pixels")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=os.path.join("experiments", "out", "resize_conventions.png"))
    args = parser.parse_args(argv)

    op = jit_loader.load("resize")
    img = test_image(args.size).to(args.device)
    out_size = (round(args.size * args.scale),) * 2
    resized = {m: op.resize_bilinear(img, size=out_size, coordinate_mode=m)[0, 0].cpu() for m in MODES}
    base = resized["half_pixel"]
    stats = {}
    print(f"# {args.size}x{args.size} test card resized to {out_size[0]}x{out_size[1]}, "
          f"values in [0, 1]; differences against PyTorch's half_pixel")
    for m in MODES[1:]:
        diff = resized[m] - base
        stats[m] = {"max_abs": diff.abs().max().item(), "mean_abs": diff.abs().mean().item(),
                    "pixels_off_by_0.1": (diff.abs() > 0.1).double().mean().item()}
        print(f"{m:>14}: max |diff| {stats[m]['max_abs']:.4f}, mean |diff| {stats[m]['mean_abs']:.4f}, "
              f"{100 * stats[m]['pixels_off_by_0.1']:.1f}% of pixels off by more than 0.1")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(16, 8.4))
    axes[0, 0].imshow(img[0, 0].cpu(), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    axes[0, 0].set_title(f"input {args.size}x{args.size}")
    for ax, m in zip(axes[0, 1:], MODES):
        ax.imshow(resized[m], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"{LABELS[m]}\n{out_size[0]}x{out_size[1]}")
    row = out_size[0] // 2
    axes[1, 0].plot(base[row], label="half_pixel")
    for m in MODES[1:]:
        axes[1, 0].plot(resized[m][row], label=m, alpha=0.8)
    axes[1, 0].set_xlim(0, out_size[1] // 3)
    axes[1, 0].set_title(f"row {row}, first third")
    axes[1, 0].legend(fontsize=8)
    for ax, m in zip(axes[1, 1:3], MODES[1:]):
        diff = resized[m] - base
        shown = ax.imshow(diff, cmap="coolwarm", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(f"{m} - half_pixel\nmax {stats[m]['max_abs']:.3f}, mean {stats[m]['mean_abs']:.3f}")
        fig.colorbar(shown, ax=ax, fraction=0.046)
    diff = resized["asymmetric"] - base
    axes[1, 3].hist(diff.flatten().numpy(), bins=60, log=True)
    axes[1, 3].set_title("asymmetric - half_pixel, histogram")
    for ax in list(axes[0]) + list(axes[1, 1:3]):
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"saved {args.out}")
    return stats


if __name__ == "__main__":
    main()
