"""Importing an op's Python surface ``<op>/<op>.py`` (and importing it again on reload)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
import types
import weakref
from pathlib import Path

import torch

from jit_tools import _torch_private, registry, sources
from jit_tools.builder import process_pieces
from jit_tools.log import logger
from jit_tools.state import OpState


def module_name(op_dir: Path, name: str) -> str:
    """``ops.<op>.<op>`` for a bundled op (so it is the module ``import ops.<op>`` gives),
    else ``<package>.<op>`` in a private package unique to the folder (see
    :func:`_private_package`)."""
    if op_dir.parent == sources.OPS_DIR.resolve() and (sources.OPS_DIR / "__init__.py").is_file():
        return f"ops.{name}.{name}"
    return f"_jit_ops_{name}_{hashlib.sha256(str(op_dir).encode()).hexdigest()[:8]}.{name}"


def warm_source_lookup() -> None:
    """Map the loaded modules to their files now, in a thread, while an op's compilers run.
    A surface's ``torch.library.register_fake`` records where it was called from through
    ``inspect``, whose first lookup in a process maps every loaded module (about 0.05 s
    with torch imported); done here, the surface's import after the build skips it."""
    def warm():
        with contextlib.suppress(Exception):
            inspect.getmodule(sys._getframe())
    threading.Thread(target=warm, name="jit_loader-warm", daemon=True).start()


def _private_package(name: str, op_dir: Path) -> None:
    """Register the package of an op folder outside ``ops/`` so the surface's relative
    imports (``from .reference import ...``) find the folder's other modules. The folder's
    ``__init__.py`` is not run: it usually calls ``load``, which is what runs now."""
    package = name.rpartition(".")[0]
    if not package.startswith("_jit_ops_") or package in sys.modules:
        return
    spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
    spec.submodule_search_locations = [str(op_dir)]
    sys.modules[package] = importlib.util.module_from_spec(spec)


def import_surface(state: OpState) -> None:
    """(Re-)execute the op's Python surface if it has one, withdrawing the registrations
    its previous version made; on an exception the previous module stays current.

    A surface imported before runs again in the same module object (as
    ``importlib.reload`` does), so the module, and every function of it handed out
    earlier, stay the ones callers hold: such a function gets the new code in place
    (:func:`_update_earlier`, as IPython's autoreload does), so that ``fn = op.rmsnorm``
    taken before a schema change calls the new signature."""
    path = None if state.sources is not None else sources.surface_path(state.op_dir, state.name)
    if path is None:
        state.set_module(None, handle_attributes(state, None))
        return
    registry.destroy_module_libraries(state.module)
    name = module_name(state.op_dir, state.name)
    state.module_name = name
    _private_package(name, state.op_dir)
    existing = sys.modules.get(name)
    if existing is not None and state.module is None:
        # imported directly before load(); it is current
        state.set_module(existing, handle_attributes(state, existing))
        state.surface_text = path.read_text()
        return
    previous = state.module
    text = path.read_text()
    if previous is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
    else:
        module = previous
    earlier = dict(vars(module))
    sys.modules[name] = module
    try:
        _execute(module, path, text, earlier)
    except BaseException as err:
        # Nothing of the failed import stays registered; the previous surface comes back
        # with its registrations (its text runs again), and the op stays marked broken,
        # so every load raises until the file imports.
        registry.destroy_module_libraries(module)
        state.surface_error = err
        if previous is not None and state.surface_text is not None:
            try:
                _execute(module, path, state.surface_text, earlier)
            except Exception as again:  # the error the caller sees is the first one
                logger.warning("the previous Python surface of %r did not import again either: %s",
                               state.name, again)
                registry.destroy_module_libraries(module)
                vars(module).clear()
                vars(module).update(earlier)
            state.set_module(module, handle_attributes(state, module))
        else:
            sys.modules.pop(name, None)
        raise
    state.set_module(module, handle_attributes(state, module))
    state.surface_text, state.surface_error = text, None
    _IMPORTED_AT[name] = process_pieces.pieces_arrived()


# Surface module name -> process_pieces.pieces_arrived() when it was last imported.
_IMPORTED_AT: dict[str, int] = {}


def went_without_pieces(state: OpState) -> bool:
    """Whether a shared piece of the process (the C++ autograd kernel, the fast entry)
    that was building in the background when the op's surface last imported has been
    built since: the surface then registered the Python autograd in its place, and
    imports again at the next load or reload to take the piece up. Costs a dictionary
    lookup (and a ``waitpid`` per build still running)."""
    imported = _IMPORTED_AT.get(state.module_name)
    return imported is not None and imported != process_pieces.pieces_arrived()


# What a module object holds from its creation; kept when its text runs again.
_MODULE_DUNDERS = ("__name__", "__package__", "__loader__", "__spec__", "__file__", "__cached__",
                   "__builtins__")


def _execute(module: types.ModuleType, path: Path, text: str, earlier: dict) -> None:
    """Run ``text`` in ``module``, emptied first (a name the text no longer defines is
    gone), then give the objects of ``earlier`` (its dictionary before) the new code."""
    namespace = vars(module)
    kept = {k: namespace[k] for k in _MODULE_DUNDERS if k in namespace}
    namespace.clear()
    namespace.update(kept, __doc__=None)  # the text's docstring, if it has one, replaces it
    exec(compile(text, str(path), "exec"), namespace)
    _update_earlier(module, earlier)


# (module name, name) -> weak references to every class (and every function whose code
# could not be replaced) that name was bound to before: each gets the newest code.
_EARLIER: dict[tuple[str, str], list[weakref.ref]] = {}


def _update_earlier(module: types.ModuleType, earlier: dict) -> None:
    """Functions and classes the module's previous run defined, handed out since to any
    caller, behave as the new run's: a function gets the new code, defaults and
    attributes in place, and stays the module's (so its identity holds); a class gets
    its methods, static and class methods and properties updated (its instances run the
    new code), and the module holds the new class."""
    namespace = vars(module)
    for name, new in list(namespace.items()):
        function = isinstance(new, types.FunctionType) and new.__globals__ is namespace
        if not (function or isinstance(new, type) and new.__module__ == module.__name__):
            continue  # not defined by the module's own code
        refs = _EARLIER.setdefault((module.__name__, name), [])
        olds = [o for o in (r() for r in refs) if o is not None]
        old = earlier.get(name)
        if old is not None and old is not new and all(o is not old for o in olds):
            olds.append(old)
        if function:
            olds = [o for o in olds if isinstance(o, types.FunctionType) and o.__globals__ is namespace]
            updated = [o for o in olds if _update_function(o, new)]
            if updated:  # the module keeps the function callers hold, with the new code
                namespace[name] = updated[0]
            olds = [o for o in olds if o is not namespace[name]]
        else:
            olds = [o for o in olds if isinstance(o, type)]
            for o in olds:
                _update_class(o, new)
            olds.append(new)
        refs[:] = [weakref.ref(o) for o in olds]


def _update_function(old: types.FunctionType, new: types.FunctionType) -> bool:
    """Give ``old`` the code of ``new`` (and what its closure holds); False where their
    closures differ in shape, which a code object cannot cross."""
    if old.__code__.co_freevars != new.__code__.co_freevars:
        return False
    old.__code__ = new.__code__
    for old_cell, new_cell in zip(old.__closure__ or (), new.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell
            old_cell.cell_contents = new_cell.cell_contents
    for attr in ("__defaults__", "__kwdefaults__", "__doc__", "__annotations__", "__qualname__"):
        with contextlib.suppress(AttributeError, TypeError):
            setattr(old, attr, getattr(new, attr))
    old.__dict__.clear()
    old.__dict__.update(new.__dict__)
    _torch_private.forget_argument_layout(old)
    return True


def _update_class(old: type, new: type) -> None:
    """The methods of ``old`` (plain, static, class, properties) get the code of ``new``'s,
    and methods ``new`` adds are added; everything else of ``old`` stays."""
    for key, value in vars(new).items():
        held = vars(old).get(key)
        if isinstance(value, types.FunctionType):
            if not (isinstance(held, types.FunctionType) and _update_function(held, value)):
                _set(old, key, value)
        elif isinstance(value, (staticmethod, classmethod)):
            if not (type(held) is type(value) and isinstance(held.__func__, types.FunctionType)
                    and isinstance(value.__func__, types.FunctionType)
                    and _update_function(held.__func__, value.__func__)):
                _set(old, key, value)
        elif isinstance(value, property):
            _set(old, key, value)


def _set(cls: type, key: str, value) -> None:
    with contextlib.suppress(AttributeError, TypeError):
        setattr(cls, key, value)


def newest(state: OpState, attr: str):
    """``attr`` of the op's pybind11 module; a function comes wrapped so that it always
    calls the newest build's function of that name."""
    value = getattr(state.ext_module, attr)
    if not callable(value) or isinstance(value, type):
        return value

    @functools.wraps(value)
    def newest_function(*args, **kwargs):
        return getattr(state.ext_module, attr)(*args, **kwargs)

    return newest_function


def handle_attributes(state: OpState, module: types.ModuleType | None) -> dict:
    """What the op's handles hold as class attributes (handle.Op): each public name of the
    dispatcher ops of its namespaces, then of its pybind11 module, then of its surface
    ``module``, a later one taking a name from an earlier one."""
    attributes: dict = {}
    for ns in state.namespaces:
        packets = getattr(torch.ops, ns)
        for op in registry.held_ops(ns):
            if "." not in op:
                attributes[op] = getattr(packets, op)
    if state.ext_module is not None:
        for attr in vars(state.ext_module):
            if not attr.startswith("_"):
                attributes[attr] = newest(state, attr)
    if module is not None:
        attributes.update((k, v) for k, v in vars(module).items() if not k.startswith("_"))
    return attributes


def import_extension(so: Path, name: str, key: str):
    """Import a build's ``PYBIND11_MODULE`` as a module of its own.

    A dotted, per-build spec name: the init symbol stays ``PyInit_<name>``, but
    pybind11's per-interpreter module cache (keyed by spec name) misses, so the new
    build really initialises instead of handing back the old module.
    """
    spec = importlib.util.spec_from_file_location(f"_jit_build_{key}.{name}", so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
