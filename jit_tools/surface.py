"""Importing an op's Python surface ``<op>/<op>.py`` (and importing it again on reload)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
from pathlib import Path

from jit_tools import registry, sources
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
    its previous version made; on an exception the previous module stays current."""
    path = None if state.sources is not None else sources.surface_path(state.op_dir, state.name)
    if path is None:
        state.set_module(None)
        return
    registry.destroy_module_libraries(state.module)
    name = module_name(state.op_dir, state.name)
    state.module_name = name
    _private_package(name, state.op_dir)
    existing = sys.modules.get(name)
    if existing is not None and state.module is None:
        state.set_module(existing)  # imported directly before load(); it is current
        state.surface_text = path.read_text()
        return
    previous = state.module
    text = path.read_text()
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)
    except BaseException as err:
        # Nothing of the failed import stays registered; the previous surface comes back
        # with its registrations (its text runs again), and the op stays marked broken,
        # so every load raises until the file imports.
        registry.destroy_module_libraries(module)
        state.surface_error = err
        sys.modules.pop(name, None)
        if previous is not None and state.surface_text is not None:
            try:
                state.set_module(_execute(name, path, state.surface_text))
            except Exception as again:  # the error the caller sees is the first one
                logger.warning("the previous Python surface of %r did not import again either: %s",
                               state.name, again)
        raise
    state.set_module(module)
    state.surface_text, state.surface_error = text, None


def _execute(name: str, path: Path, text: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(text, str(path), "exec"), module.__dict__)
    return module


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
