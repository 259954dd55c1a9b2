"""The fast Python entry to an op (``jit_loader.fast_op``): an op object that calls the
dispatcher the way torch's generated bindings do, instead of through ``torch.ops``.

A call through ``torch.ops.ns.op.default`` runs the overload's Python ``__call__`` and
then torch's generic binding, which converts each argument by the schema at every call;
for an op on a small CPU tensor that costs more than the op (``torch.ops.aten.sigmoid
.default`` costs 1.6x ``torch.sigmoid``, RESULTS.md, "Call overhead"). The entry of
``csrc/jit_loader_fastcall.cpp`` reads the schema once and converts only what a call
passes. It is a shared piece, built once per exact torch build and Python
(``process_pieces.fastcall_piece``). While it builds in the background, ``fast_op``
returns an object that calls as the overload does and takes the entry up in place once it
is built (:func:`upgrade`); where it failed to build, for a prebuilt (AOT) op, where no
compiler is to run, and with ``JIT_LOADER_FASTCALL=0``, the overload itself.

The object ``fast_op`` returns is an ``OpOverload`` of a subclass made for it: the same
attributes, schema, hash and Python kernels as the overload, so torch.compile, opcheck,
the autograd machinery and the loader's reload handling treat it as the op; only a call
from Python differs. Anything the entry does not take itself (a tensor subclass, a
``__torch_function__`` mode, an argument of another type, a keyword it does not know) goes
to the overload, which is what a call through ``torch.ops`` does. Results and errors are
the same either way (``tests/test_fastcall.py``), with one exception, for the loader's own
ops: where the overload raises because a tensor argument got ``None`` or a non-tensor, or an
argument of the wrong type, the error is one ``TypeError`` line naming the op, the argument
and the value (``sigmoid.forward: x must be a Tensor, got None``) instead of the
dispatcher's text; only the error path pays for it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from types import ModuleType

from jit_tools import _torch_private
from jit_tools.builder import process_pieces
from jit_tools.log import logger
from jit_tools.state import LOCK, PREBUILT_NAMESPACES, loaded_states

ENV = "JIT_LOADER_FASTCALL"

_MODULES: dict[str, ModuleType | None] = {}
_STARTED: set[str] = set()
# Qualified overload name -> (the overload, its fast object). A new overload object for the
# name (after a schema change the loader lets the old operator entry go) gets a new one.
_MADE: dict[str, tuple[object, object]] = {}


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def extension() -> ModuleType | None:
    """The loaded extension module, or None: disabled, failed to build, or not built yet
    (then a background build starts, once per process, unless ``JIT_LOADER_SHARED_NOW``
    builds it now; the objects ``fast_op`` hands out meanwhile take it up once it is
    built: :func:`upgrade`)."""
    if not enabled():
        return None
    pieces = process_pieces
    return pieces.process_piece(pieces.fastcall_piece, pieces.build_fastcall_later, _MODULES, _STARTED,
                                _import, "the fast Python entry (calls go through torch.ops)",
                                when_built=upgrade)


def _import(path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(process_pieces.FASTCALL_MODULE, str(path))
    spec = importlib.util.spec_from_file_location(process_pieces.FASTCALL_MODULE, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def fast_op(overload):
    """``overload`` (an ``OpOverload`` such as ``torch.ops.ns.op.default``) as an op object
    whose calls from Python take the fast entry; the overload itself where there is no
    entry (see the module's doc) or its schema has a type the entry does not take."""
    if not enabled() or not _torch_private.is_plain_overload(overload):
        return overload
    name = overload._name
    made = _MADE.get(name)
    if made is not None and made[0] is overload:
        if _torch_private.fast_call_of(made[1]) is None:
            upgrade()  # built since, by this process's background build or another process
        return made[1]
    if overload._schema.name.split("::", 1)[0] in PREBUILT_NAMESPACES:
        return overload  # a prebuilt (AOT) op: no compiler is to run for it
    module = extension()
    if module is None:
        if not process_pieces.building(process_pieces.fastcall_piece):
            return overload
        # The entry builds in the background: an object that calls as the overload does
        # until then, and takes the entry up in place once it is built (upgrade), so a
        # surface's _FORWARD = fast_op(...) gets fast without running the surface again.
        fast = _torch_private.overload_with_call(overload)
        _MADE[name] = (overload, fast)
        return fast
    call = _entry(module, overload)
    if call is None:
        return overload
    fast = _torch_private.overload_with_call(overload, call)
    _MADE[name] = (overload, fast)
    return fast


def _entry(module: ModuleType, overload):
    """The fast entry of ``overload``, or None where the entry does not take its schema."""
    schema = overload._schema
    namespace = schema.name.split("::", 1)[0]
    # The loader's own ops explain a wrong argument in one line; other ops (aten's) raise
    # exactly what torch.ops raises.
    explain = any(namespace in state.namespaces for state in loaded_states())
    try:
        return module.make(overload, schema.name, schema.overload_name, explain)
    except (ValueError, RuntimeError) as e:  # a schema it does not take, or not a dispatcher
        # op (torch.ops also lists TorchScript's own operators): torch.ops serves
        logger.debug("%s", e)
        return None


def upgrade() -> int:
    """Give the objects ``fast_op`` made while the entry was building their entry, now that
    it is built (called by the thread that watched its build, and at every ``fast_op``
    call that finds it); returns how many. Under the loader's lock: no reload frees an
    operator entry meanwhile, and a retired object is no longer among them."""
    with LOCK:
        waiting = [(o, f) for o, f in _MADE.values() if _torch_private.fast_call_of(f) is None]
        module = extension() if waiting else None
        if module is None:
            return 0
        for overload, fast in waiting:
            call = _entry(module, overload)
            if call is not None:
                _torch_private.set_fast_call(fast, call)
        return len(waiting)


def is_fast(obj) -> bool:
    """Whether calls of ``obj`` (what ``fast_op`` returned) take the fast entry now."""
    return _torch_private.fast_call_of(obj) is not None


def retire(fast) -> None:
    """The operator entry of ``fast`` is about to be freed: its calls go to the overload
    (which the loader has pointed at a stand-in that raises)."""
    call = _torch_private.fast_call_of(fast)
    for module in _MODULES.values():  # one per folder of pieces this process used
        if call is None or module is None:
            continue
        try:
            module.retire(call)
            break
        except TypeError:  # made by another folder's build of the entry
            continue
    name = getattr(fast, "_name", None)
    if name in _MADE and _MADE[name][1] is fast:
        del _MADE[name]

