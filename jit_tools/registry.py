"""Registering a build with the dispatcher, and withdrawing it before the next one.

Every op is compiled with jit_loader_registry.h force-included: its TORCH_LIBRARY
blocks only record themselves when the library is loaded. The header's
``jit_loader_register`` performs them into ``torch::Library`` objects the library
owns, and ``jit_loader_unregister`` destroys those objects, which withdraws every
definition and kernel. So a new build of the same namespace registers without the
dispatcher's duplicate-registration error.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
import types
from pathlib import Path
from typing import Iterable

import torch

from jit_tools import _torch_private, fastcall
from jit_tools.errors import JitLoaderError
from jit_tools.state import KEEPALIVE

_ENTRY_POINTS = ("jit_loader_register", "jit_loader_unregister", "jit_loader_namespaces")


def open_library(path: Path):
    """dlopen a build (RTLD_LOCAL: two builds of one op never share symbols)."""
    lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    for fn in _ENTRY_POINTS:
        if not hasattr(lib, fn):
            raise JitLoaderError(f"{path} was not built by jit_loader (no {fn})")
    lib.jit_loader_register.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.jit_loader_register.restype = ctypes.c_int
    lib.jit_loader_namespaces.restype = ctypes.c_char_p
    return lib


def undefined_symbol(dlerror: str) -> str | None:
    """The symbol a failed dlopen names as undefined, demangled; None for other errors."""
    m = re.search(r"undefined symbol: (\S+)", dlerror)
    if m is None:
        return None
    mangled = m.group(1)
    try:
        out = subprocess.run(["c++filt", mangled], capture_output=True, text=True, timeout=10)
        demangled = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        demangled = ""
    return demangled if demangled and demangled != mangled else mangled


def namespaces_of(lib) -> list[str]:
    names = lib.jit_loader_namespaces()
    if names is None:
        raise JitLoaderError("the op library could not list its namespaces (out of memory)")
    return names.decode().split()


class SchemaChanged(JitLoaderError):
    """The dispatcher refused a build because an operator it declares already exists
    with another schema or kernel signature (the previous build's)."""


def register(lib, op_name: str = "", previous_schemas: dict[str, list[str]] | None = None) -> None:
    """Perform a build's registrations; a JitLoaderError explaining the dispatcher's
    refusal in one line otherwise (nothing of the build stays registered then):
    :class:`SchemaChanged` when an operator's schema differs from the live one's."""
    buf = ctypes.create_string_buffer(16384)
    if lib.jit_loader_register(buf, len(buf)) != 0:
        message = buf.value.decode(errors="replace")
        text = explain_refusal(op_name, message, previous_schemas or {})
        if previous_schemas and is_schema_change(message):
            raise SchemaChanged(text)
        raise JitLoaderError(text)
    namespaces = namespaces_of(lib)
    if previous_schemas:
        # A stable op's boxed kernels carry no C++ signature, so the dispatcher takes a new
        # schema into the live operator entry. Python's objects of that entry (the one the
        # dispatcher hands to __torch_dispatch__ and torch.compile among them) keep the
        # old schema: let the entry go as for a refusal, so that fresh ones serve.
        now = {q: _torch_private.schemas(q) for q in previous_schemas}
        changed = [(q, old, now[q]) for q, old in previous_schemas.items() if now[q] and now[q] != old]
        if changed:
            lib.jit_loader_unregister()
            q, old, new = changed[0]
            raise SchemaChanged(f"op {op_name!r} changed a schema: {q} was `{'; '.join(old)}`, "
                                f"the new build has `{'; '.join(new)}`.")
    # Keep-alive registrations of ops this build no longer declares are ours, not the
    # user's dangling kernels: let them go first (the entries are freed).
    release(namespaces, undeclared(namespaces))
    dangling = [d for d in _torch_private.dangling_impls()
                if any(f"{ns}::" in d for ns in namespaces)]
    if dangling:
        lib.jit_loader_unregister()
        names = sorted(set(re.findall(r"(?:operator|name): ([\w:.]+)", "\n".join(dangling)))) or dangling
        raise JitLoaderError(
            f"op {op_name!r} registers a kernel (m.impl) for {', '.join(names)}, which no m.def "
            f"declares: declare it in TORCH_LIBRARY or fix the name. Dispatcher report:\n"
            + "\n".join(dangling))


def register_impls(lib, key: str, op_name: str = "") -> None:
    """Perform only a build's kernel blocks of dispatch key ``key`` (``"CPU"``), over the
    live build's registrations: the newest kernel of a key is the one the dispatcher runs,
    so the live build's stay, shadowed, and nothing is ever without a kernel."""
    lib.jit_loader_register_impls.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.jit_loader_register_impls.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(16384)
    if lib.jit_loader_register_impls(key.encode(), buf, len(buf)) != 0:
        raise JitLoaderError(explain_refusal(op_name, buf.value.decode(errors="replace"), {}))


def explain_refusal(op_name: str, message: str, previous_schemas: dict[str, list[str]]) -> str:
    """One line saying why the dispatcher refused a build, then its own message without
    the C++ stack frames."""
    message = message.split("\nException raised from", 1)[0].strip()
    m = re.search(r"Only a single TORCH_LIBRARY can be used to register the namespace (\w+)", message)
    if m:
        places = re.findall(r"registered at (\S+?):\d+", message)
        where = f" ({places[0]})" if places else ""
        return (f"op {op_name!r} declares namespace {m.group(1)!r}, which another op folder{where} "
                f"already declared in this process; namespaces are process-wide: rename one "
                f"TORCH_LIBRARY namespace, or load one of the two per process.\n{message}")
    if previous_schemas and is_schema_change(message):
        new = re.search(r"operator: (\S+?\(.*)", message)
        qual = new.group(1).split("(")[0] if new else None
        old = previous_schemas.get(qual, []) if qual else []
        changed = (f"{qual} was `{old[0]}`, the new build has `{new.group(1).strip()}`"
                   if new and old else "an operator's schema or kernel signature changed")
        return (f"op {op_name!r} changed a schema: {changed}.\n{message}")
    return f"registering op {op_name!r} with the dispatcher failed: {message}"


def is_schema_change(message: str) -> bool:
    """Whether the dispatcher's refusal says an operator exists with another schema or
    C++ kernel signature."""
    return re.search(r"Mismatch in kernel C\+\+ signatures|different schema|schema mismatch|"
                     r"already has a schema|Tried to register", message, re.IGNORECASE) is not None


def current_schemas(namespaces: Iterable[str]) -> dict[str, list[str]]:
    """``ns::op`` -> schemas of the ops a build registered, while it is live."""
    all_names = _torch_private.dispatcher_op_names()
    return {f"{ns}::{op}": _torch_private.schemas(f"{ns}::{op}")
            for ns in namespaces for op in ops_in(ns, all_names)}


def unregister(lib) -> None:
    lib.jit_loader_unregister()


def ops_in(namespace: str, all_names: Iterable[str] | None = None) -> list[str]:
    """Names (``op`` or ``op.overload``) of the operators declared in ``namespace``.
    An entry the dispatcher keeps only for kernels (no schema: an op whose declaration
    was withdrawn) is not an operator anyone can call, so it is left out. ``all_names``:
    the dispatcher's op names, where the caller has them already."""
    prefix = namespace + "::"
    if all_names is None:
        all_names = _torch_private.dispatcher_op_names()
    return sorted(n[len(prefix):] for n in all_names
                  if n.startswith(prefix) and _torch_private.has_schema(n))


def keepalive(namespaces: Iterable[str]) -> None:
    """Hold one harmless registration per op so the dispatcher never frees an operator
    entry between withdrawing an old build and registering the new one: Python code
    may hold ``torch.ops.ns.op.default`` objects that point at it. One library per op,
    so that an op a new build no longer declares can be let go alone."""
    all_names = _torch_private.dispatcher_op_names()
    for ns in namespaces:
        held = KEEPALIVE.setdefault(ns, {})
        for op in ops_in(ns, all_names):
            if op in held:
                continue
            lib = torch.library.Library(ns, "FRAGMENT")
            try:
                lib.impl(op, _keepalive_kernel, "PrivateUse3")
            except RuntimeError:
                _torch_private.destroy_library(lib)
                continue
            held[op] = lib


def held_ops(namespace: str) -> list[str]:
    """The operators of ``namespace`` the live build declares, as :func:`keepalive` holds
    them (no query of the dispatcher)."""
    return sorted(KEEPALIVE.get(namespace, {}))


def release(namespaces: Iterable[str], ops: Iterable[str] | None = None) -> list[str]:
    """Let go of the keep-alive registrations of ``ops`` (``ns::op`` names; all ops of
    ``namespaces`` when None), so the dispatcher frees the operator entries nothing else
    holds. Every Python object that pointed at a freed entry is retired (calling it raises
    a clear error instead of touching freed memory), torch.ops forgets the ops, and
    torch.compile recompiles. Returns the ``ns::op`` names whose entries are gone."""
    namespaces = list(namespaces)
    wanted = None if ops is None else set(ops)
    let_go = [(ns, op) for ns in namespaces for op in KEEPALIVE.get(ns, {})
              if wanted is None or f"{ns}::{op}" in wanted]
    if not let_go:
        return []
    before = {n for n in _torch_private.dispatcher_op_names()
              if n.split("::", 1)[0] in namespaces}
    for ns, op in let_go:
        _torch_private.destroy_library(KEEPALIVE[ns].pop(op))
    gone = sorted(before - set(_torch_private.dispatcher_op_names()))
    if gone:
        retired = _torch_private.retire_op_objects(
            gone, "{name} belongs to a build that was replaced: the operator was withdrawn or "
                  "changed its schema in a reload. Look it up again (torch.ops.{ns}.{op}, or "
                  "the op's handle, which always follows the newest build).")
        for obj in retired:  # the fast entry holds the operator entry too
            if _torch_private.is_fast_object(obj):
                fastcall.retire(obj)
        clear_ops_cache(namespaces)
        _torch_private.forget_schema_signatures(gone)
        _torch_private.reset_compiled_code()
    return gone


def holders(qualnames: Iterable[str]) -> list[str]:
    """What, besides the loader, still holds registrations on ``qualnames`` (the
    dispatcher's own report for each), e.g. a ``torch.library.Library`` made in a
    notebook cell; such an operator entry cannot be freed."""
    out = []
    for q in qualnames:
        if q in _torch_private.dispatcher_op_names():
            out.append(_torch_private.registrations_of(q))
    return out


def undeclared(namespaces: Iterable[str]) -> list[str]:
    """``ns::op`` of the keep-alive registrations whose operator no longer has a schema:
    a new build stopped declaring it (its source was deleted, or the m.def removed)."""
    return [f"{ns}::{op}" for ns in namespaces for op in KEEPALIVE.get(ns, {})
            if not _torch_private.has_schema(f"{ns}::{op}")]


def _keepalive_kernel(*args, **kwargs):
    raise NotImplementedError("jit_loader keep-alive kernel (PrivateUse3) is never used")


def clear_ops_cache(namespaces: Iterable[str]) -> None:
    """Drop cached torch.ops.ns.op packets so the next access sees the new schema."""
    for ns in namespaces:
        if ns in vars(torch.ops):
            _torch_private.forget_ops_namespace(getattr(torch.ops, ns))


def missing_cuda_kernels(namespaces: Iterable[str], why: str) -> list:
    """A library built without CUDA: CUDA calls of its ops fail saying ``why`` instead of
    a generic 'could not run ... with arguments from the CUDA backend'. Returns the
    libraries holding those kernels (destroy them to withdraw)."""
    libs = []
    all_names = _torch_private.dispatcher_op_names()
    for ns in namespaces:
        lib = torch.library.Library(ns, "FRAGMENT")
        for op in ops_in(ns, all_names):
            full = f"{ns}::{op}"
            if _torch_private.has_kernel(full, "CUDA") or not _torch_private.has_kernel(full, "CPU"):
                continue

            def kernel(*args, _name=full, **kwargs):
                raise RuntimeError(f"{_name} has no CUDA kernel: {why}")
            with contextlib.suppress(RuntimeError):
                lib.impl(op, kernel, "CUDA")
        libs.append(lib)
    return libs


def destroy_libraries(libs: Iterable[torch.library.Library]) -> None:
    for lib in libs:
        _torch_private.destroy_library(lib)


def destroy_module_libraries(module: types.ModuleType | None) -> None:
    """Withdraw the Python-side registrations (fake kernels, autograd) an op's Python
    module made through module-level ``torch.library.Library`` objects."""
    if module is None:
        return
    for value in list(vars(module).values()):
        if isinstance(value, torch.library.Library):
            _torch_private.destroy_library(value)
