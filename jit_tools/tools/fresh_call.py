"""One call of an op, made again in a fresh process: what ``sanitize`` runs under
compute-sanitizer and ``profile`` under ncu.

A function cannot travel to another process, but where it comes from can: the parent
describes each call as a :class:`Call` (where its function is found, its arguments saved
with ``torch.save``), writes a spec of JSON beside them, and runs this module on it::

    python -m jit_tools.tools.fresh_call SPEC.json

The child loads the ops the calls need (with the options the parent gives, e.g. a debug
build), resolves each function, loads its arguments onto the devices they were saved from,
and makes the calls, each with its backward where one is asked for. A function is found as

* ``surface``: a name of an op's Python surface (``op.my_op``, ``op.MyOpFunction.apply``
  is not one: pass ``op.my_op``);
* ``torch_op``: a dispatcher op, ``torch.ops.ns.name[.overload]``;
* ``import``: a function importable by module and name (``torch.sigmoid``, a function of
  an importable module of yours), with every op this process loaded loaded in the child
  too, so the ops it calls through ``torch.ops`` are there.

Anything else (a lambda, a function defined in a notebook) raises a TypeError saying so.
The child writes what happened to ``result.json``: each call's outcome, the error that
stopped it where one did.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

import torch

from jit_tools.errors import JitLoaderError
from jit_tools.state import loaded_states


@dataclasses.dataclass
class Call:
    """One call: where its function is found, its arguments, whether its backward runs."""
    label: str
    target: dict
    args: tuple
    kwargs: dict
    backward: bool


def _surface_of(fn) -> tuple[Path, str] | None:
    """(op folder, name) when ``fn`` is a public name of a loaded op's Python surface."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__name__", None)
    for state in loaded_states():
        if state.module is not None and state.sources is None and module == state.module_name:
            if name and getattr(state.module, name, None) is fn:
                return state.op_dir, name
    return None


def _op_name(fn) -> str | None:
    """``ns::name.overload`` of a dispatcher op (an ``OpOverload``, a packet: its default)."""
    if isinstance(fn, torch._ops.OpOverloadPacket):
        fn = fn.default
    if isinstance(fn, torch._ops.OpOverload):
        return f"{fn._schema.name}.{fn._overloadname}"
    return None


def _importable(fn) -> tuple[str, str] | None:
    """(module, name) under which ``fn`` is found by import: its qualified name, else its
    plain name in its module (torch's builtins: ``torch.sigmoid`` is a method of a class)."""
    module = getattr(fn, "__module__", None)
    if not module or module == "__main__":
        return None
    for qualname in (getattr(fn, "__qualname__", None), getattr(fn, "__name__", None)):
        if not qualname or "<" in qualname:
            continue
        try:
            found = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            continue
        if found is fn:
            return module, qualname
    return None


def describe(fn, tool: str) -> tuple[dict, list[Path]]:
    """(target, op folders the child must load) of ``fn``; TypeError naming what can
    travel when ``fn`` cannot. ``tool`` names the caller in messages."""
    surface = _surface_of(fn)
    if surface is not None:
        return {"kind": "surface", "op": str(surface[0]), "name": surface[1]}, [surface[0]]
    qualname = _op_name(fn)
    if qualname is not None:
        namespace = qualname.split("::", 1)[0]
        owners = [s.op_dir for s in loaded_states() if namespace in s.namespaces and s.sources is None]
        return {"kind": "torch_op", "name": qualname}, owners
    importable = _importable(fn)
    if importable is not None:
        others = [s.op_dir for s in loaded_states() if s.sources is None and s.key is not None]
        return {"kind": "import", "module": importable[0], "qualname": importable[1]}, others
    raise TypeError(
        f"{tool}: {fn!r} cannot be called in a fresh process: pass a function of an op "
        "(op.my_op, where op = jit_loader.load(...)), a dispatcher op (torch.ops.ns.name), or a "
        "function importable by its module and name; a lambda or a function defined in a "
        "notebook or in __main__ is none of these")


def label_of(fn) -> str:
    """How a report names the call's function."""
    return _op_name(fn) or ".".join(filter(None, (getattr(fn, "__module__", None),
                                                  getattr(fn, "__qualname__", None)))) or repr(fn)


def wants_backward(args: Sequence, kwargs: dict, backward: bool | None) -> bool:
    """``backward``, or where it is None: whether any tensor argument requires grad."""
    if backward is not None:
        return bool(backward)
    values = [*args, *kwargs.values()]
    flat = [v for a in values for v in (a if isinstance(a, (list, tuple)) else (a,))]
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in flat)


def write_spec(folder: Path, calls: Sequence[Call], ops: Sequence[Path], options: dict,
               mode: str) -> Path:
    """Write the calls' arguments and the spec into ``folder``; the spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save([(c.args, c.kwargs) for c in calls], folder / "args.pt")
    spec = {
        "mode": mode,
        "ops": [{"path": str(p), "options": options.get(str(p), {})} for p in dict.fromkeys(ops)],
        "calls": [{"label": c.label, "target": c.target, "backward": c.backward} for c in calls],
        "args": str(folder / "args.pt"),
        "result": str(folder / "result.json"),
    }
    path = folder / "spec.json"
    path.write_text(json.dumps(spec, indent=1))
    return path


def read_result(spec_path: Path) -> dict:
    """What the child wrote (``{}`` when it wrote nothing: it died first)."""
    try:
        return json.loads(Path(json.loads(spec_path.read_text())["result"]).read_text())
    except (OSError, ValueError, KeyError):
        return {}


# ---- the child ----------------------------------------------------------------------------

def _resolve(target: dict, handles: dict):
    kind = target["kind"]
    if kind == "surface":
        value = getattr(handles[target["op"]], target["name"])
        # As jit_loader.check_op takes a case's fn: a module class is instantiated, an
        # autograd.Function is applied.
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            return value()
        if isinstance(value, type) and issubclass(value, torch.autograd.Function):
            return value.apply
        return value
    if kind == "torch_op":
        qualified, overload = target["name"].rsplit(".", 1)
        namespace, name = qualified.split("::", 1)
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    found = importlib.import_module(target["module"])
    for part in target["qualname"].split("."):
        found = getattr(found, part)
    return found


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _run_backward(out) -> None:
    """The backward of every tensor result that has a graph, with a gradient of ones."""
    outputs = [t for t in _tensors(out) if t.requires_grad]
    if outputs:
        torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])


def run(spec: dict, result: dict) -> None:
    """Load the ops, make the calls (mode ``run``; ``profile``: once to warm up, then
    again between cudaProfilerStart and Stop; ``build``: load the ops only); what
    happened goes into ``result`` as it happens."""
    from jit_tools import handle

    handles = {}
    for op in spec["ops"]:
        handles[op["path"]] = handle.load_folder(op["path"], **op["options"])
    result["builds"] = {path: h.build.key for path, h in handles.items()}
    if spec["mode"] == "build":
        return
    saved = torch.load(spec["args"], weights_only=False)
    calls = [(c, _resolve(c["target"], handles), *saved[i]) for i, c in enumerate(spec["calls"])]

    def call_all():
        for c, fn, args, kwargs in calls:
            result["current"] = c["label"]
            result["made"] = result.get("made", 0) + 1
            out = fn(*args, **kwargs)
            if c["backward"]:
                _run_backward(out)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        result.pop("current", None)

    if spec["mode"] == "profile":
        call_all()  # warm-up: first-call work (lazy module loads, autotuning) stays out
        profiling = torch.cuda.is_available()  # CPU calls: nothing for a profiler to start
        if profiling:
            torch.cuda.profiler.start()
        try:
            call_all()
        finally:
            if profiling:
                torch.cuda.profiler.stop()
    else:
        call_all()
    result["done"] = [c["label"] for c in spec["calls"]]


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    result: dict[str, Any] = {"error": None}
    try:
        run(spec, result)
        status = 0
    except BaseException as e:  # reported to the parent, whatever it is
        result.update(error=f"{type(e).__name__}: {e}".strip(), traceback=traceback.format_exc())
        status = 1
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    # A sanitizer's findings can leave the context unusable, and torch's exit handlers
    # then fail again: the outcome is written, so leave without them.
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
