"""Call overhead: every bundled op's Python function against its native twin on tiny inputs.

A researcher's op is often called on small tensors in a loop (a recurrent cell per time
step, a post-process per image, a scatter per graph layer); there the device waits for the
host, and the host time of one call is the whole cost. Each case times a call that a user
writes, ``op = jit_loader.load("sigmoid"); op.sigmoid(x)`` (the handle, the surface
function, the dispatcher op, its autograd), against the op PyTorch ships for the same job,
forward and forward+backward (``.sum().backward()``), with ``benchutil.host_time``: best of
five runs of many back-to-back calls, one sync at the end of a run on CUDA. On a GPU the
rows inside a CUDA graph give the floor: replay time per op, no host work at all.

The section is part of the suite (``experiments/bench.py``, section ``overhead``):

    python -m experiments.bench --only overhead [--quick] [--ops sigmoid,resize]

CPU rows always; CUDA rows and the CUDA graph rows where a GPU is visible (and the suite's
device is CUDA). Limits (the overhead issue): our call at most 1.25x the native twin's host
time in forward, 1.5x in forward+backward. Rows of mode "aten via torch.ops" (no limit) time
the native twin's own aten op entered through ``torch.ops``, as every custom op is: the
floor of a custom op's Python call. Rows of mode "cell" (CUDA): the LLTM cell at the
tutorial's size (16x32x128) against the eager cell, limits 0.2x forward and 0.333x
forward+backward (the issue's targets, 5x and 3x eager).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F

import jit_loader
from experiments.benchutil import Skipped

try:
    import torchvision
except ImportError:  # the detection twins are torchvision's; their rows are then skipped
    torchvision = None

LIMITS = {"forward": 1.25, "forward+backward": 1.5}
# The LLTM cell at the tutorial's size on CUDA (mode "cell"): the overhead issue's targets,
# forward at least 5x and forward+backward at least 3x eager, as limits of ours / eager.
CELL_MODE = "cell"
CELL_LIMITS = {"forward": 1 / 5, "forward+backward": 1 / 3}
# Ops captured per CUDA graph of the graph rows: the replay's own launch is shared by them.
GRAPH_OPS = 20
PASSES = ("forward", "forward+backward")


@dataclasses.dataclass
class OverheadCase:
    """One row: ``build()`` allocates the inputs, checks that ours and the native twin
    agree, and returns ``(ours, native)``, two callables of one call each (one graph
    replay of ``ops_per_call`` ops in mode ``cuda graph``)."""

    op: str
    pass_: str
    shape: str
    device: str
    ours: str
    native: str
    build: Callable[[], tuple[Callable[[], object], Callable[[], object]]]
    mode: str = "eager"
    dtype: str = "float32"
    ops_per_call: int = 1

    @property
    def limit(self) -> float | None:
        return {"eager": LIMITS, CELL_MODE: CELL_LIMITS}.get(self.mode, {}).get(self.pass_)

    @property
    def label(self) -> str:
        where = self.device if self.mode == "eager" else "cuda graph" if self.mode == "cuda graph" \
            else f"{self.mode} {self.device}"
        return f"overhead {self.op} {self.pass_} {self.shape} {where}"


def _backward(out):
    """Backward of a call's result(s) with fixed upstream gradients: ``.sum().backward()``."""
    outs = out if isinstance(out, tuple) else (out,)
    torch.autograd.backward([o.sum() for o in outs])


def _pair(ours, native, pass_, inputs):
    """``(ours, native)`` for the pass: the call itself, or the call and its backward into
    ``inputs`` (their grads accumulate, in both alike)."""
    for t in inputs:
        t.requires_grad_(pass_ != "forward")
    if pass_ == "forward":
        return ours, native
    return (lambda: _backward(ours())), (lambda: _backward(native()))


def _check(ours, native, inputs, pass_, **tol):
    """Fail loudly rather than time a wrong answer: outputs (and gradients) agree."""
    def run(fn):
        for t in inputs:
            t.grad = None
        out = fn()
        outs = list(out) if isinstance(out, tuple) else [out]
        if pass_ != "forward":
            _backward(out)
            outs += [t.grad for t in inputs]
        return [o.detach() for o in outs]
    for a, b in zip(run(ours), run(native)):
        torch.testing.assert_close(a, b, **tol)
    for t in inputs:
        t.grad = None


def _graphed(fn: Callable[[], object], ops: int = GRAPH_OPS) -> Callable[[], object]:
    """A CUDA graph of ``ops`` calls of ``fn``; returns its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as torch asks
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ops):
            fn()
    return graph.replay


def _gelu_reference(x):
    return x * torch.sigmoid(1.702 * x)


def _pointwise(name, native_name, native, reference, device, pass_):
    """sigmoid or gelu against ``native``; checked against ``reference`` (gelu's sigmoid
    approximation is not F.gelu's erf)."""
    def build():
        op = jit_loader.load(name)
        x = torch.randn(64, device=device)
        # Through the handle at each call, as a user writes it.
        ours = (lambda: op.sigmoid(x)) if name == "sigmoid" else (lambda: op.gelu(x))
        pair = _pair(ours, lambda: native(x), pass_, [x])
        _check(ours, lambda: reference(x), [x], pass_, atol=1e-5, rtol=1e-5)
        return pair
    return OverheadCase(name, pass_, "64", device, f"op.{name}(x)", native_name, build)


def _resize(device, pass_):
    def build():
        op = jit_loader.load("resize")
        x = torch.randn(1, 1, 4, 4, device=device)
        ours = lambda: op.resize_bilinear(x, (8, 8))
        native = lambda: F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False)
        pair = _pair(ours, native, pass_, [x])
        _check(ours, native, [x], pass_, atol=1e-5, rtol=1e-5)
        return pair
    return OverheadCase("resize", pass_, "1x1x4x4->8x8", device, "op.resize_bilinear(x, (8, 8))",
                        "F.interpolate(x, size=(8, 8), mode='bilinear')", build)


SCATTER_TWINS = {
    "sum": "zeros(16).scatter_add_(0, index, src)",
    "mean": "zeros(16).scatter_reduce(0, index, src, 'mean', include_self=False)",
    "max": "zeros(16).scatter_reduce(0, index, src, 'amax', include_self=False)",
}


def _scatter(device, pass_, reduce):
    def build():
        op = jit_loader.load("scatter")
        src = torch.randn(64, device=device)
        index = torch.randint(0, 16, (64,), device=device)
        ours = lambda: op.scatter(src, index, 0, dim_size=16, reduce=reduce)
        if reduce == "sum":
            native = lambda: src.new_zeros(16).scatter_add_(0, index, src)
        else:
            kind = "amax" if reduce == "max" else reduce
            native = lambda: src.new_zeros(16).scatter_reduce(0, index, src, kind, include_self=False)
        pair = _pair(ours, native, pass_, [src])
        _check(ours, native, [src], pass_, atol=1e-5, rtol=1e-5)
        return pair
    return OverheadCase("scatter", pass_, f"{reduce} 64->16", device,
                        f"op.scatter(src, index, 0, dim_size=16, reduce='{reduce}')",
                        SCATTER_TWINS[reduce], build)


def _boxes(n, device):
    xy = torch.rand(n, 2, device=device) * 12
    return torch.cat([xy, xy + 1 + torch.rand(n, 2, device=device) * 4], dim=1)


def _nms(device):
    def build():
        op = jit_loader.load("detection")
        boxes, scores = _boxes(64, device), torch.rand(64, device=device)
        ours = lambda: op.nms(boxes, scores, 0.5)
        native = lambda: torchvision.ops.nms(boxes, scores, 0.5)
        _check(ours, native, [], "forward")
        return ours, native
    return OverheadCase("nms", "forward", "64 boxes", device, "op.nms(boxes, scores, 0.5)",
                        "torchvision.ops.nms(boxes, scores, 0.5)", build)


def _roi_align(device, pass_):
    def build():
        op = jit_loader.load("detection")
        x = torch.randn(1, 4, 4, 4, device=device)
        rois = torch.cat([torch.zeros(4, 1, device=device), _boxes(4, device) / 4], dim=1)
        ours = lambda: op.roi_align(x, rois, 2, 1.0, 2, True)
        native = lambda: torchvision.ops.roi_align(x, rois, 2, 1.0, 2, True)
        pair = _pair(ours, native, pass_, [x])
        _check(ours, native, [x], pass_, atol=1e-5, rtol=1e-5)
        return pair
    return OverheadCase("roi_align", pass_, "1x4x4x4, 4 rois -> 2x2", device,
                        "op.roi_align(x, rois, 2, 1.0, 2, True)",
                        "torchvision.ops.roi_align(x, rois, 2, 1.0, 2, True)", build)


def _lltm(device, pass_):
    def build():
        from ops.lltm.reference import example_inputs, lltm_reference

        op = jit_loader.load("lltm")
        inputs = example_inputs(device, batch=4, input_features=4, state_size=16,
                                requires_grad=False)
        ours = lambda: op.lltm(*inputs)
        native = lambda: lltm_reference(*inputs)
        pair = _pair(ours, native, pass_, list(inputs))
        _check(ours, native, list(inputs), pass_, atol=1e-5, rtol=1e-5)
        return pair
    return OverheadCase("lltm", pass_, "4x4, state 16", device, "op.lltm(input, W, b, h, c)",
                        "lltm_reference(input, W, b, h, c) (eager)", build)


def _lltm_cell(pass_):
    """The LLTM cell (``op.LLTM``, an nn.Module) at the tutorial's size against the eager
    reference cell, by the kernel suite's protocol: parameters need grad, input and state do
    not; forward+backward is ``torch.autograd.grad`` into the parameters (nothing accumulates)."""
    def build():
        from ops.lltm.reference import LLTMReference

        op = jit_loader.load("lltm")
        torch.manual_seed(0)
        reference = LLTMReference(32, 128).cuda()
        cell = op.LLTM(32, 128).cuda()
        cell.load_state_dict(reference.state_dict())
        x, h, c = (torch.randn(16, n, device="cuda") for n in (32, 128, 128))
        cotangents = (torch.randn(16, 128, device="cuda"), torch.randn(16, 128, device="cuda"))

        def run(module):
            if pass_ == "forward":
                return lambda: module(x, (h, c))
            params = list(module.parameters())
            return lambda: torch.autograd.grad(module(x, (h, c)), params, cotangents)

        ours, native = run(cell), run(reference)
        for a, b in zip(ours(), native()):
            torch.testing.assert_close(a.detach(), b.detach(), atol=1e-4, rtol=1e-3)
        return ours, native
    return OverheadCase("lltm", pass_, "16x32x128", "cuda", "cell(x, (h, c)), cell = op.LLTM",
                        "the same, cell = LLTMReference (eager)", build, mode=CELL_MODE)


# The floor: the native twin's own aten op entered the way a custom op's Python function
# enters its op, through torch.ops (OpOverload.__call__, then the C++ entry that parses the
# arguments by the schema and makes a boxed call), against the twin's generated binding.
FLOOR_MODE = "aten via torch.ops"


def _floor_sigmoid(device):
    def build():
        x = torch.randn(64, device=device)
        entry = torch.ops.aten.sigmoid.default
        ours, native = (lambda: entry(x)), (lambda: torch.sigmoid(x))
        _check(ours, native, [], "forward")
        return ours, native
    return OverheadCase("sigmoid", "forward", "64", device, "torch.ops.aten.sigmoid.default(x)",
                        "torch.sigmoid(x)", build, mode=FLOOR_MODE)


def _floor_resize(device):
    def build():
        x = torch.randn(1, 1, 4, 4, device=device)
        entry = torch.ops.aten.upsample_bilinear2d.vec
        ours = lambda: entry(x, [8, 8], False, None)
        native = lambda: F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False)
        _check(ours, native, [], "forward")
        return ours, native
    return OverheadCase("resize", "forward", "1x1x4x4->8x8", device,
                        "torch.ops.aten.upsample_bilinear2d.vec(x, [8, 8], False, None)",
                        "F.interpolate(x, size=(8, 8), mode='bilinear')", build, mode=FLOOR_MODE)


def _graph_case(case: OverheadCase) -> OverheadCase:
    """The forward case ``case`` inside a CUDA graph: replay time per op."""
    def build():
        ours, native = case.build()
        return _graphed(ours), _graphed(native)
    return dataclasses.replace(case, mode="cuda graph", build=build, ops_per_call=GRAPH_OPS)


def overhead_cases(device: str) -> list[OverheadCase | Skipped]:
    """The rows of the section: CPU always; CUDA and CUDA graph rows when ``device`` is
    CUDA; what cannot run here as ``Skipped``."""
    devices = ["cpu"] + (["cuda"] if torch.device(device).type == "cuda" else [])
    cases: list[OverheadCase | Skipped] = []
    if "cuda" not in devices:
        cases.append(Skipped("overhead", "CUDA and CUDA graph rows", "no GPU visible"
                             if not torch.cuda.is_available() else "the suite runs on the CPU"))
    for dev in devices:
        for pass_ in PASSES:
            cases += [_pointwise("sigmoid", "torch.sigmoid(x)", torch.sigmoid, torch.sigmoid,
                                 dev, pass_),
                      _pointwise("gelu", "F.gelu(x)", F.gelu, _gelu_reference, dev, pass_),
                      _resize(dev, pass_)]
            cases += [_scatter(dev, pass_, reduce) for reduce in SCATTER_TWINS]
            cases.append(_lltm(dev, pass_))
            if torchvision is None:
                cases.append(Skipped("roi_align", f"overhead {pass_} {dev}",
                                     "torchvision is not importable"))
            else:
                cases.append(_roi_align(dev, pass_))
        if torchvision is None:
            cases.append(Skipped("nms", f"overhead forward {dev}", "torchvision is not importable"))
        else:
            cases.append(_nms(dev))
        cases += [_floor_sigmoid(dev), _floor_resize(dev)]
        if dev == "cuda":
            cases += [_lltm_cell(pass_) for pass_ in PASSES]
    if "cuda" in devices:
        cases += [_graph_case(c) for c in cases if isinstance(c, OverheadCase)
                  and c.device == "cuda" and c.pass_ == "forward" and c.mode == "eager"
                  and c.op in ("sigmoid", "gelu", "resize")]
    return cases
