"""Export a small model built on our ops for the C++ runner (deploy/runner).

    python -m deploy.export_model --out deploy/out [--device cuda] [--steps 3]

writes into ``--out``:

* ``model.pt2``   torch.export + AOTInductor package (``aoti_compile_and_package``);
* ``model.ts``    the legacy path: a TorchScript trace (where this torch still has it);
* ``inputs.pt``   the example inputs (a list of CPU tensors, ``torch::pickle_load``-able);
* ``expected.pt`` the outputs of the eager Python model on those inputs (CPU tensors).

The model is gelu -> LLTM cell (``steps`` times) -> sigmoid on the dispatcher ops
``torch.ops.gelu/lltm/sigmoid``; a Linear in front gives AOTInductor an aten op of
its own to compile beside ours. Whether the ops come from a JIT build or a prebuilt
library (JIT_LOADER_PREBUILT) does not matter here: export only needs their schemas and
fake kernels; the runner loads the prebuilt libraries.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from ops.gelu.gelu import GELU
from ops.lltm.lltm import LLTM
from ops.sigmoid.sigmoid import Sigmoid

# AOTInductor links the model library with the compiler's default C++ runtime. A compiler
# whose libstdc++.so development link is missing (the GPU image's) silently takes
# libstdc++.a instead, and that second, static C++ runtime inside the model breaks the
# model's constructor in a process that already runs torch's shared one: its std::regex
# (device-string parsing) looks up locale facets the other runtime registered, and
# segfaults or throws std::bad_cast. Link the runtime torch uses by its soname, as the JIT
# loader and deploy/setup.py do for the ops. (``custom_op_libs`` entries become ``-l``
# link arguments.)
INDUCTOR_CONFIGS = ({"aot_inductor.custom_op_libs": [":libstdc++.so.6"]}
                    if sys.platform.startswith("linux") else {})


class OpsModel(nn.Module):
    """``steps`` LLTM steps over a sequence; each step's input goes through
    Linear + our GELU; the last hidden state through our sigmoid."""

    def __init__(self, input_features: int = 32, state_size: int = 64):
        super().__init__()
        self.proj = nn.Linear(input_features, input_features)
        self.act = GELU()
        self.cell = LLTM(input_features, state_size)
        self.out = Sigmoid()

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        for t in range(x.shape[0]):
            h, c = self.cell(self.act(self.proj(x[t])), (h, c))
        return self.out(h), c


def example_inputs(steps: int = 3, batch: int = 4, input_features: int = 32, state_size: int = 64,
                   device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.randn(steps, batch, input_features, device=device),
            torch.randn(batch, state_size, device=device),
            torch.randn(batch, state_size, device=device))


def export(out: Path, device: str = "cpu", steps: int = 3, torchscript: bool = True) -> dict:
    """Write the package, the TorchScript file (if possible), inputs and expected outputs."""
    out.mkdir(parents=True, exist_ok=True)
    model = OpsModel().to(device).eval()
    inputs = example_inputs(steps, device=device)
    written = {"inputs": str(out / "inputs.pt"), "expected": str(out / "expected.pt")}
    with torch.no_grad():
        expected = model(*inputs)
        torch.save([t.cpu() for t in inputs], written["inputs"])
        torch.save([t.cpu() for t in expected], written["expected"])
        if torchscript:
            ts = _torchscript(model, inputs, out / "model.ts")
            if ts is not None:
                written["ts"] = ts
        started = time.perf_counter()
        program = torch.export.export(model, inputs)
        written["pt2"] = torch._inductor.aoti_compile_and_package(
            program, package_path=str(out / "model.pt2"), inductor_configs=INDUCTOR_CONFIGS)
        print(f"export + AOTInductor compile: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return written


def _torchscript(model: nn.Module, inputs, path: Path) -> str | None:
    """TorchScript is deprecated in favour of torch.export; trace where it still works."""
    trace = getattr(getattr(torch, "jit", None), "trace", None)
    if trace is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notice
        traced = trace(model, inputs, check_trace=False)
        traced.save(str(path))
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("deploy/out"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-torchscript", action="store_true")
    args = parser.parse_args(argv)
    written = export(args.out, args.device, args.steps, not args.no_torchscript)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
