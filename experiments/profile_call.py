"""Where the host time of one op call goes, layer by layer, for sigmoid, resize, the LLTM or
any op.

A call ``op.sigmoid(x)`` passes through: the handle's attribute lookup (``jit_tools/handle.py``:
handles follow reloads), the surface function (``ops/sigmoid/sigmoid.py``), the
``torch.ops`` attribute lookups and the packet's overload resolution (``OpOverloadPacket``),
``OpOverload.__call__``, the dispatcher, the autograd kernel (the loader's C++ kernel of
``register_autograd_op``, or ``register_autograd``'s Python one where that piece is not built,
e.g. with ``JIT_LOADER_CPP_AUTOGRAD=0``), then the kernel with its output's allocation. Three
views:

1. **Ladder.** The same call entered at each layer, from the dispatcher's C++ entry (below
   autograd) up to the handle; each rung's host time minus the one below is that layer's cost.
   Timed with ``benchutil.host_time`` (best of five runs, rungs interleaved; each call of a
   rung is a loop of ``--batch`` calls, so that the autograd-exclusion guard of the lowest
   rungs is entered once per loop). Forward with an input that needs no grad, and
   forward+backward (``.sum().backward()``) with one that does.
2. **cProfile** of the top rung, its time grouped by layer (by the file and function each
   profiled function belongs to). cProfile adds a fixed cost to every Python call, so it
   inflates the Python layers: read it for what runs, the ladder for how long.
3. **torch.profiler**: the dispatcher-level events of the top rung (ops, allocation,
   autograd nodes), self CPU time per call.

The LLTM's ladder follows the kernel suite's protocol at the tutorial's size (16x32x128;
parameters need grad, input and state do not; forward+backward is ``torch.autograd.grad``
into the parameters), from the C++ entry up to the ``nn.Module`` call, with three reference
rungs for forward+backward: the backward op alone (no engine), its weight GEMM alone, and the
autograd engine's floor (``autograd.grad`` of one clone).

    python -m experiments.profile_call [--device cuda] [--ops sigmoid,resize,lltm] [--calls 2000]
    python -m experiments.profile_call --ops my_op,path/to/other_op   # any op with a reference.py

Any other op (a name under ops/ or an op folder's path) is profiled on the first case of its
``reference.check_cases``: the call of its surface function, the dispatcher op that function
calls, and its reference in place of a native twin.

On CUDA each run ends with one sync (the rate a Python loop of enqueues sustains).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import importlib.util
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import jit_loader
from experiments import benchutil

# Layer of a profiled function: the first (path fragment, function name prefix or None)
# that matches. C functions have the path "~" and names like "<built-in method ...>".
AUTOGRAD_KERNEL = "autograd kernel (Python path: register_autograd)"
CPP = "C++ below the Python entry (dispatcher, kernel, allocation)"
LAYERS = [
    ("jit_tools/handle.py", None, "handle lookup (jit_tools/handle.py)"),
    ("torch/_library/autograd.py", None, AUTOGRAD_KERNEL),
    ("torch/autograd/function.py", None, AUTOGRAD_KERNEL),
    ("torch/_library/utils.py", None, AUTOGRAD_KERNEL),
    ("torch/_ops.py", "redispatch", AUTOGRAD_KERNEL),
    ("~", "<built-in method apply>", AUTOGRAD_KERNEL),
    ("~", "<built-in method torch.is_grad_enabled>", AUTOGRAD_KERNEL),
    ("~", "<built-in method torch._C._any_requires_grad>", AUTOGRAD_KERNEL),
    ("~", "<method 'redispatch_boxed'", AUTOGRAD_KERNEL),
    ("torch/_library/fake_impl.py", None, "fake-tensor / compile support"),
    ("torch/_subclasses/", None, "fake-tensor / compile support"),
    ("torch/_dynamo/", None, "fake-tensor / compile support"),
    ("torch/_ops.py", "__getattr__", "torch.ops attribute lookup"),
    ("torch/_ops.py", None, "torch.ops packet and overload (Python)"),
    ("torch/_tensor.py", "backward", "autograd engine"),
    ("torch/autograd/", None, "autograd engine"),
    ("~", "<method 'run_backward'", "autograd engine"),
    ("jit_tools/autograd.py", None, "setup_context / backward of the Python path"),
    ("ops/", None, "surface function (Python)"),
    ("experiments/profile_call.py", None, "benchmark loop"),
    ("~", "<method 'sum'", ".sum() (the benchmark's loss)"),
    ("~", "<built-in method torch._ops.", CPP),
    ("~", "<built-in method builtins.", "Python builtins (getattr, any, isinstance...)"),
    ("~", "<", "other C calls"),
]


def layer_of(filename: str, function: str) -> str:
    path = filename.replace("\\", "/")
    for fragment, name, layer in LAYERS:
        if (path == "~") == (fragment == "~") and fragment in path:
            if name is None or function.startswith(name):
                return layer
    return "other Python"


@dataclasses.dataclass
class CallCase:
    """A tiny call of an op: the surface function and its arguments, the dispatcher op it
    calls and that op's arguments, and the native twin (or the op's reference)."""

    op: object             # the op's handle (jit_loader.load)
    surface_name: str      # the surface function, module.<surface_name>
    surface_args: tuple    # its arguments
    overload: object       # the dispatcher op the surface calls (an OpOverload)
    args: tuple            # that op's arguments
    native: Callable[[], object]
    twin: str = "native twin"

    @property
    def x(self) -> torch.Tensor:
        """The input that needs grad for forward+backward: the first floating tensor."""
        return next(a for a in self.surface_args
                    if isinstance(a, torch.Tensor) and a.is_floating_point())


def cases(op_name: str, device: str, pass_: str = "forward") -> CallCase:
    """A tiny call of ``op_name`` (a bundled op's name or any op folder's path): sigmoid's and
    resize's against their native twins; any other op's from its reference.py."""
    op = jit_loader.load(op_name)
    if op_name == "sigmoid":
        x = torch.randn(64, device=device, requires_grad=pass_ != "forward")
        return CallCase(op, "sigmoid", (x,), torch.ops.sigmoid.forward.default, (x,),
                        lambda: torch.sigmoid(x))
    if op_name == "resize":
        x = torch.randn(1, 1, 4, 4, device=device, requires_grad=pass_ != "forward")
        native = lambda: F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False)
        return CallCase(op, "resize_bilinear", (x, (8, 8)), torch.ops.resize.forward.default,
                        (x, [8, 8], "half_pixel", None), native)
    return reference_case(op, device, pass_)


def reference_case(op, device: str, pass_: str) -> CallCase:
    """The first case of the op's ``reference.check_cases(device)`` in float32: its surface
    function and inputs, the dispatcher op that function calls (the first op of the op's
    namespaces a dispatch mode sees) with the arguments it gets, and the reference as the
    twin."""
    from torch.utils._python_dispatch import TorchDispatchMode

    spec = importlib.util.spec_from_file_location(f"_profile_{op.name}_reference",
                                                  Path(op.path) / "reference.py")
    if spec is None or not (Path(op.path) / "reference.py").is_file():
        raise SystemExit(f"profile_call: op {op.name!r} has no reference.py with check_cases "
                         "to take a call from")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    case = next(iter(reference.check_cases(device).values()))
    inputs = tuple(a.detach().to(device=device, dtype=torch.float32)
                   if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                   for a in case["inputs"])
    first = next(a for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point())
    first.requires_grad_(pass_ != "forward")
    surface = getattr(op.module, case["fn"])
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace in op.namespaces and not seen:
                seen.append((func, args))
            return func(*args, **(kwargs or {}))

    with Record():
        surface(*inputs)
    if not seen:
        raise SystemExit(f"profile_call: {case['fn']}(...) of op {op.name!r} called no op of its "
                         f"namespaces {op.namespaces}")
    overload, args = seen[0]
    return CallCase(op, case["fn"], inputs, overload, tuple(args),
                    lambda: case["reference"](*inputs), twin="reference (eager)")


def batched(call, batch: int, then=None):
    """A fn of ``batch`` calls of ``call``, each result handed to ``then`` where given (the
    backward of a forward+backward rung)."""
    if then is None:
        def fn():
            for _ in range(batch):
                call()
    else:
        def fn():
            for _ in range(batch):
                then(call())
    return fn


# The surfaces call their ops through the loader's fast entry (jit_loader.fast_op), not
# through torch.ops: this rung takes the place of the torch.ops rungs below it, so what it
# "adds" is negative, the saving; the surface's rung adds to it.
FAST_RUNG = "+ fast entry in place of torch.ops: jit_loader.fast_op(overload)(*args)"


def _first(result):
    return result[0] if isinstance(result, (tuple, list)) else result


def rungs(op_name: str, device: str, pass_: str, batch: int):
    """``{rung: fn}``: each fn makes ``batch`` calls entered at that layer."""
    case = cases(op_name, device, pass_)
    op, overload, args, x = case.op, case.overload, case.args, case.x
    ns_name, packet_name = overload._schema.name.split("::")
    packet = overload.overloadpacket
    module_fn = getattr(op.module, case.surface_name)
    below = torch._C._AutoDispatchBelowAutograd

    def loop(call):
        return batched(call, batch, None if pass_ == "forward" else lambda y: _first(y).sum().backward())

    def guarded(call):
        def fn():
            with below():
                for _ in range(batch):
                    call()
        return fn

    out = {}
    if pass_ == "forward":
        out["dispatcher + kernel: OpOverload._op, below autograd (C++ entry)"] = guarded(
            lambda: overload._op(*args))
        out["+ OpOverload.__call__ (Python), below autograd"] = guarded(lambda: overload(*args))
    else:
        out[".sum().backward() of the input alone (the loss)"] = loop(lambda: x)
    out["+ autograd kernel: OpOverload(*args)"] = loop(lambda: overload(*args))
    out["+ packet overload resolution: packet(*args)"] = loop(lambda: packet(*args))
    out[f"+ torch.ops lookups: torch.ops.{ns_name}.{packet_name}(*args)"] = loop(
        lambda: getattr(getattr(torch.ops, ns_name), packet_name)(*args))
    fast = jit_loader.fast_op(overload)
    out[FAST_RUNG] = loop(lambda: fast(*args))
    out[f"+ surface: module.{case.surface_name}(...)"] = loop(lambda: module_fn(*case.surface_args))
    out[f"+ handle: op.{case.surface_name}(...)"] = loop(
        lambda: getattr(op, case.surface_name)(*case.surface_args))
    out[case.twin] = loop(case.native)
    if pass_ == "forward":
        result = _first(case.native()).detach()
        out["allocation alone: torch.empty_like(result)"] = loop(lambda: torch.empty_like(result))
    return out


# The LLTM's rungs follow the kernel suite's protocol (experiments/bench_lltm.py) at the
# tutorial's size: parameters need grad, input and state do not; forward+backward is
# ``torch.autograd.grad`` of both outputs into the parameters for fixed cotangents.
LLTM_SIZE = (16, 32, 128)
LLTM_TOP = "+ nn.Module: cell(x, (h, c)) (the suite's call)"


def lltm_rungs(device: str, pass_: str, batch: int):
    """``{rung: fn}`` of the LLTM cell, each fn ``batch`` calls; the top rung is the suite's."""
    from ops.lltm.reference import LLTMReference

    op = jit_loader.load("lltm")
    size = LLTM_SIZE
    torch.manual_seed(0)
    reference = LLTMReference(size[1], size[2]).to(device)
    cell = op.LLTM(size[1], size[2]).to(device)
    cell.load_state_dict(reference.state_dict())
    x = torch.randn(size[0], size[1], device=device)
    h, c = (torch.randn(size[0], size[2], device=device) for _ in range(2))
    params = (cell.weights, cell.bias)
    args = (x, cell.weights, cell.bias, h, c)
    cotangents = tuple(torch.randn(size[0], size[2], device=device) for _ in range(2))
    overload = torch.ops.lltm.forward.default
    surface = op.module.lltm

    def loop(call, params=params):
        return batched(call, batch, None if pass_ == "forward"
                       else lambda y: torch.autograd.grad(y[:2], params, cotangents))

    out = {}
    if pass_ == "forward":
        def below_fn():
            with torch._C._AutoDispatchBelowAutograd():
                for _ in range(batch):
                    overload._op(*args)
        out["dispatcher + kernel: OpOverload._op, below autograd (C++ entry)"] = below_fn
    else:
        new_h, new_cell, gates, hx = (t.detach() for t in overload(*args))
        mask = [False, True, True, False, False]
        backward = torch.ops.lltm.backward.default

        def backward_alone():
            with torch.no_grad():
                for _ in range(batch):
                    backward(*cotangents, new_cell, gates, hx, cell.weights, mask)
        d_gates = torch.randn_like(gates)

        def mm_alone():
            for _ in range(batch):
                torch.mm(d_gates.t(), hx)
        weights, ones = cell.weights, torch.ones_like(cell.weights)

        def engine_floor():
            for _ in range(batch):
                torch.autograd.grad(weights.clone(), weights, ones)
        out["the backward op alone, no engine: torch.ops.lltm.backward.default"] = backward_alone
        out["its weight GEMM alone: torch.mm(d_gates.t(), hx)"] = mm_alone
        out["engine floor: autograd.grad(W.clone(), W, g)"] = engine_floor
    out["+ autograd kernel: OpOverload(*args)"] = loop(lambda: overload(*args))
    out["+ packet overload resolution: torch.ops.lltm.forward(*args)"] = loop(
        lambda: torch.ops.lltm.forward(*args))
    fast = jit_loader.fast_op(overload)
    out[FAST_RUNG] = loop(lambda: fast(*args))
    out["+ surface: module.lltm(...)"] = loop(lambda: surface(*args))
    out["+ handle: op.lltm(...)"] = loop(lambda: op.lltm(*args))
    out[LLTM_TOP] = loop(lambda: cell(x, (h, c)))
    out["native twin: reference eager cell(x, (h, c))"] = loop(
        lambda: reference(x, (h, c)), (reference.weights, reference.bias))
    return out


def top_rung(op_name: str, device: str, pass_: str):
    """The fn of one call at the top rung (what a user writes)."""
    if op_name == "lltm":
        return lltm_rungs(device, pass_, 1)[LLTM_TOP]
    return next(fn for name, fn in rungs(op_name, device, pass_, 1).items()
                if name.startswith("+ handle: "))


TIMER_RUNG = "nothing: the timer's own cost"


def ladder(op_name, device, pass_, calls, batch, clock=time.perf_counter, cold=False):
    """Rows of the ladder. ``cold``: each rung's single calls interleaved with the other
    rungs' and timed one by one (``benchutil.measure``, CUDA events on a GPU), as the kernel
    suite times host-bound cases, so each call finds the caches holding the other rungs'
    code; the median call, and a rung that calls nothing gives the timer's own share."""
    batch = 1 if cold else batch
    fns = lltm_rungs(device, pass_, batch) if op_name == "lltm" else \
        rungs(op_name, device, pass_, batch)
    if cold:
        fns = {TIMER_RUNG: lambda: None, **fns}
        measured = benchutil.measure(fns, device, reps=max(20, min(calls, 2000) // len(fns)),
                                     warmup=20, clock=clock)
        timing = {name: (t.median, t.q3) for name, t in measured.items()}
    else:
        host = benchutil.host_time(fns, device, calls=max(1, calls // batch), runs=5, warmup=3,
                                   ops_per_call=batch, clock=clock)
        timing = {name: (t.best, t.median) for name, t in host.items()}
    rows, below = [], None
    for name, (best, spread) in timing.items():
        us = best * 1e6
        layered = name.startswith("+ ")
        rows.append({"op": op_name, "pass": pass_, "entered at": name,
                     ("median call us" if cold else "us per call"): us,
                     ("third quartile us" if cold else "median run us"): spread * 1e6,
                     "layer adds us": (us - below) if layered and below is not None else None})
        if name.startswith("+ "):
            below = us
        elif not name.startswith(("native", "reference", "allocation", "the backward op",
                                  "its weight", "engine floor", "nothing")):
            below = us
    return rows


def cprofile_layers(op_name, device, pass_, calls):
    """Seconds per call of the top rung by layer (tottime: each function's own time)."""
    fn = top_rung(op_name, device, pass_)
    for _ in range(50):
        fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    benchutil.sync(device)
    profiler.disable()
    stats = pstats.Stats(profiler)
    by_layer, functions = defaultdict(float), defaultdict(list)
    for (filename, _, function), (_, ncalls, tottime, _, _) in stats.stats.items():
        if ncalls < calls:  # once per run (the profiler itself, the sync), not per call
            continue
        layer = layer_of(filename, function)
        by_layer[layer] += tottime / calls
        functions[layer].append((tottime / calls, f"{function} ({ncalls // calls}x)"))
    total = sum(by_layer.values())
    rows = []
    for layer, seconds in sorted(by_layer.items(), key=lambda kv: -kv[1]):
        top = ", ".join(name for _, name in sorted(functions[layer], reverse=True)[:4])
        rows.append({"op": op_name, "pass": pass_, "layer": layer, "us per call": seconds * 1e6,
                     "share %": 100 * seconds / total, "biggest functions": top})
    return rows


def torch_profile(op_name, device, pass_, calls):
    """Self CPU time per call of the dispatcher-level events of the top rung."""
    from torch.profiler import ProfilerActivity, profile

    fn = top_rung(op_name, device, pass_)
    for _ in range(50):
        fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        benchutil.sync(device)
    rows = []
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total):
        if e.count < calls:  # once-per-run events (the sync) are not part of a call
            continue
        rows.append({"op": op_name, "pass": pass_, "event": e.key, "per call": e.count // calls,
                     "self us per call": e.self_cpu_time_total / calls,
                     "total us per call": e.cpu_time_total / calls})
    return rows[:12]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--ops", default="sigmoid,resize,lltm")
    parser.add_argument("--calls", type=int, default=4000, help="calls per timed run")
    parser.add_argument("--batch", type=int, default=100, help="calls per timed loop")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the ladder by this thread's CPU time (a loaded CPU machine; "
                             "not with --device cuda, whose waits it would miss)")
    parser.add_argument("--cold", action="store_true",
                        help="the ladder only, each rung's calls timed one by one interleaved with "
                             "the other rungs' (as the kernel suite times host-bound cases)")
    parser.add_argument("--json", metavar="PATH", help="also write the tables as JSON")
    args = parser.parse_args(argv)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    torch.set_num_threads(args.threads)
    # The steady state, as in experiments/bench.py: shared pieces built before the ops load
    # (the C++ autograd kernel among them; JIT_LOADER_CPP_AUTOGRAD=0 times the Python path).
    os.environ.setdefault("JIT_LOADER_SHARED_NOW", "1")
    tables = {"ladder": [], "cprofile": [], "torch.profiler": []}
    for op_name in args.ops.split(","):
        for pass_ in ("forward", "forward+backward"):
            calls = args.calls if pass_ == "forward" else max(args.batch, args.calls // 10)
            tables["ladder"] += ladder(op_name, args.device, pass_, calls, args.batch, clock,
                                       args.cold)
            if not args.cold:
                tables["cprofile"] += cprofile_layers(op_name, args.device, pass_, min(calls, 2000))
                tables["torch.profiler"] += torch_profile(op_name, args.device, pass_,
                                                          min(calls, 500))
    env = benchutil.environment(args.device)
    print(f"{env['device']}, torch {env['torch']}, {env['date']}, {torch.get_num_threads()} "
          f"thread(s), load average {env['load_average']}, ladder clock "
          f"{'thread CPU time' if args.cpu_time else 'wall'}")
    warning = benchutil.load_warning()
    if warning:
        print(f"warning: {warning}")
    for title, rows in tables.items():
        if not rows:
            continue
        print(f"\n## {title}\n")
        print(benchutil.format_table(rows))
    if args.json:
        benchutil.save_json(args.json, [], tables=tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
