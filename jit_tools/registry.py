"""Registering a build with the dispatcher, and withdrawing it before the next one.

Every op is compiled with jit_loader_registry.h force-included: its TORCH_LIBRARY
blocks only record themselves when the library is loaded. The glue's
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

from jit_tools import _torch_private
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
    return lib.jit_loader_namespaces().decode().split()


def register(lib, op_name: str = "", previous_schemas: dict[str, list[str]] | None = None) -> None:
    """Perform a build's registrations; a JitLoaderError explaining the dispatcher's
    refusal in one line otherwise (nothing of the build stays registered then)."""
    buf = ctypes.create_string_buffer(16384)
    if lib.jit_loader_register(buf, len(buf)) != 0:
        raise JitLoaderError(explain_refusal(op_name, buf.value.decode(errors="replace"),
                                             previous_schemas or {}))
    namespaces = namespaces_of(lib)
    dangling = [d for d in _torch_private.dangling_impls()
                if any(f"{ns}::" in d for ns in namespaces)]
    if dangling:
        lib.jit_loader_unregister()
        names = sorted(set(re.findall(r"(?:operator|name): ([\w:.]+)", "\n".join(dangling)))) or dangling
        raise JitLoaderError(
            f"op {op_name!r} registers a kernel (m.impl) for {', '.join(names)}, which no m.def "
            f"declares: declare it in TORCH_LIBRARY or fix the name. Dispatcher report:\n"
            + "\n".join(dangling))


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
    if previous_schemas and re.search(
            r"Mismatch in kernel C\+\+ signatures|different schema|schema mismatch|"
            r"already has a schema|Tried to register", message, re.IGNORECASE):
        new = re.search(r"operator: (\S+?\(.*)", message)
        qual = new.group(1).split("(")[0] if new else None
        old = previous_schemas.get(qual, []) if qual else []
        changed = (f"{qual} was `{old[0]}`, the new build has `{new.group(1).strip()}`"
                   if new and old else "an operator's schema or kernel signature changed")
        return (f"op {op_name!r} changed a schema: {changed}. The dispatcher cannot change a "
                f"schema in a live process: restart Python (in Jupyter, restart the kernel) to "
                f"use the new build; the previous build stays loaded.\n{message}")
    return f"registering op {op_name!r} with the dispatcher failed: {message}"


def current_schemas(namespaces: Iterable[str]) -> dict[str, list[str]]:
    """``ns::op`` -> schemas of the ops a build registered, while it is live."""
    return {f"{ns}::{op}": _torch_private.schemas(f"{ns}::{op}")
            for ns in namespaces for op in ops_in(ns)}


def unregister(lib) -> None:
    lib.jit_loader_unregister()


def ops_in(namespace: str) -> list[str]:
    """Names of the operators registered in ``namespace``."""
    prefix = namespace + "::"
    return sorted({n[len(prefix):] for n in _torch_private.dispatcher_op_names()
                   if n.startswith(prefix)})


def keepalive(namespaces: Iterable[str]) -> None:
    """Hold one harmless registration per op so the dispatcher never frees an operator
    entry between withdrawing an old build and registering the new one: Python code
    may hold ``torch.ops.ns.op.default`` objects that point at it."""
    for ns in namespaces:
        lib = KEEPALIVE.get(ns)
        if lib is None:
            lib = KEEPALIVE[ns] = torch.library.Library(ns, "FRAGMENT")
            lib._jit_ops = set()
        for op in ops_in(ns):
            if op in lib._jit_ops:
                continue
            with contextlib.suppress(RuntimeError):
                lib.impl(op, _keepalive_kernel, "PrivateUse3")
                lib._jit_ops.add(op)


def _keepalive_kernel(*args, **kwargs):
    raise NotImplementedError("jit_loader keep-alive kernel (PrivateUse3) is never used")


def clear_ops_cache(namespaces: Iterable[str]) -> None:
    """Drop cached torch.ops.ns.op packets so the next access sees the new schema."""
    for ns in namespaces:
        if ns in vars(torch.ops):
            _torch_private.forget_ops_namespace(getattr(torch.ops, ns))


def missing_cuda_kernels(op_name: str, namespaces: Iterable[str], reason: str) -> list:
    """Built without CUDA: make CUDA calls fail with the reason instead of a generic
    'could not run ... with arguments from the CUDA backend'. Returns the libraries
    holding those kernels (destroy them to withdraw)."""
    libs = []
    for ns in namespaces:
        lib = torch.library.Library(ns, "FRAGMENT")
        for op in ops_in(ns):
            if not _torch_private.has_kernel(f"{ns}::{op}", "CPU"):
                continue

            def kernel(*args, _name=f"{ns}::{op}", **kwargs):
                raise RuntimeError(
                    f"{_name} has no CUDA kernel: op {op_name!r} was built for CPU only "
                    f"because {reason}. Reload after fixing that to get the CUDA kernels.")
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
