"""Kernels swapped into the live process: an edited ``.cu``'s kernels compiled with NVRTC
and launched in place of the loaded build's, with no host compile, link or ``dlopen``.

Each op library carries a table of the kernels its launchers started
(``ops/common/kernel_swap.h``), switched on by :func:`track`. :func:`swap` compiles, for the
current GPU, the instantiations in that table from the op's ``.cu`` as it is now
(``jit_tools/swap/nvrtc.py``), loads them with the CUDA driver (``cuModuleLoadData``) and
installs them; the next launch of each runs the new code. Every other kernel of the
library is compiled the same way at its first launch (:func:`pend`): the library's own
code is older than the sources. It swaps only what it can prove
the loaded host code still launches correctly: the op has one ``.cu``, and every kernel
in use compiles to the same symbol (same name, template arguments and parameter types)
as the loaded build's. Anything else (a new kernel, a changed signature) raises
:class:`SwapRefused`, and the caller builds with Ninja as usual. An NVRTC error raises
BuildError; the kernels running before keep running. ``JIT_LOADER_NVRTC=0`` turns the
path off.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from pathlib import Path

from jit_tools import sources
from jit_tools.errors import JitLoaderError
from jit_tools.log import logger
from jit_tools.swap import nvrtc


# The last swap of this process: op, kernels, seconds compiling (NVRTC or its cache) and
# installing (module load, function lookup, table update); for benchmarks and logs.
LAST_SWAP: dict = {}


class SwapRefused(JitLoaderError):
    """The edit cannot be swapped in; a full build is needed."""


def enabled() -> bool:
    return os.environ.get("JIT_LOADER_NVRTC", "1") not in ("0", "false", "False", "")


# jit_loader_kernel_swap_pending's callback: (mangled name, device) -> CUfunction or null.
_COMPILE_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int)
# Every callback handed to a library stays alive: a launch in another thread may be running
# one when the next replaces it.
_CALLBACKS: list = []


def op_library(op) -> ctypes.CDLL:
    """The op's loaded library (dlopen of a loaded path returns the same handle)."""
    if not op.library:
        raise SwapRefused(f"op {op.name!r} has no loaded library")
    lib = ctypes.CDLL(op.library, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    try:
        lib.jit_loader_kernel_swap_pending.argtypes = [_COMPILE_FN]
        lib.jit_loader_kernel_swap_enable.argtypes = [ctypes.c_int]
        lib.jit_loader_kernel_name.restype = ctypes.c_char_p
        lib.jit_loader_kernel_name.argtypes = [ctypes.c_int]
        lib.jit_loader_kernel_replace.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    except AttributeError:
        raise SwapRefused(f"op {op.name!r}: its library launches no kernel through "
                          "ops_common::launch") from None
    return lib


def track(op, on: bool = True) -> None:
    """Record the kernels the op's library launches from now on (needed before a swap);
    ``on=False`` stops and drops every swapped kernel."""
    op_library(op).jit_loader_kernel_swap_enable(1 if on else 0)


def launched(op) -> list[str]:
    """Mangled names of the kernels the op launched since :func:`track`."""
    lib = op_library(op)
    names = [lib.jit_loader_kernel_name(i) for i in range(lib.jit_loader_kernel_count())]
    return [n.decode() for n in names if n]


def unnamed_namespace_free(mangled: str) -> str:
    """A mangled name without the name of a file's unnamed namespace, which nvcc derives
    from its module id and NVRTC writes as zeros."""
    m = re.search(r"(\d+)(_GLOBAL__N_)", mangled)
    if m is None:
        return mangled
    return mangled[:m.start()] + "<unnamed>" + mangled[m.start(2) + int(m.group(1)):]


# ---- the CUDA driver ----------------------------------------------------------------------

_DRIVER: list = []
_MODULES: list = []  # loaded modules stay loaded: a kernel of one may still be in flight
_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97


def _driver() -> ctypes.CDLL:
    if not _DRIVER:
        _DRIVER.append(ctypes.CDLL("libcuda.so.1"))
    return _DRIVER[0]


def _cu(status: int, what: str) -> None:
    if status != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(status, ctypes.byref(name))
        raise JitLoaderError(f"{what} failed: {(name.value or b'?').decode()} ({status})")


def _load(image: bytes, device: int) -> ctypes.c_void_p:
    """A module of ``image`` in the primary context of ``device`` (torch's context)."""
    cu = _driver()
    _cu(cu.cuInit(0), "cuInit")
    ctx = ctypes.c_void_p()
    _cu(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
    _cu(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    module = ctypes.c_void_p()
    _cu(cu.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    _MODULES.append(module)
    return module


def _function(module: ctypes.c_void_p, symbol: str, device: int) -> ctypes.c_void_p:
    cu = _driver()
    f = ctypes.c_void_p()
    _cu(cu.cuModuleGetFunction(ctypes.byref(f), module, symbol.encode()), f"cuModuleGetFunction({symbol})")
    # Launchers may ask for more than 48 KB of dynamic shared memory (they opted their own
    # kernel in with cudaFuncSetAttribute): allow the replacement all the device offers.
    optin, static = ctypes.c_int(), ctypes.c_int()
    _cu(cu.cuDeviceGetAttribute(ctypes.byref(optin),
                                _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
        "cuDeviceGetAttribute")
    _cu(cu.cuFuncGetAttribute(ctypes.byref(static), _CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f),
        "cuFuncGetAttribute")
    _cu(cu.cuFuncSetAttribute(f, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              max(0, optin.value - static.value)), "cuFuncSetAttribute")
    return f


# ---- the swap ----------------------------------------------------------------------------

def compile_in_use(name: str, op_dir: Path, in_use: list[str], arch: str,
                   opts: dict | None = None) -> tuple[nvrtc.Kernels, dict[str, str]]:
    """The kernels ``in_use`` (mangled names of a loaded build) compiled from the op's
    ``.cu`` as it is now, and name expression -> mangled name of each; SwapRefused when the
    loaded launchers could not launch them (no NVRTC path for the op's flags, more than
    one ``.cu``, a kernel whose symbol changed)."""
    if not enabled():
        raise SwapRefused("JIT_LOADER_NVRTC=0")
    cus = [_single_cu(name, op_dir)]
    if not in_use:
        raise SwapRefused(f"op {name!r} launched no kernel since kernels.track()")
    exprs = {nvrtc.name_expression(m): m for m in in_use}
    try:
        compiled = nvrtc.compile_for_op(name, Path(op_dir), cus[0], list(exprs), opts=opts,
                                        arch=arch)
    except JitLoaderError as e:
        if type(e) is JitLoaderError:  # a flag NVRTC cannot take: nvcc builds it
            raise SwapRefused(str(e)) from e
        raise
    changed = [e for e, m in exprs.items()
               if unnamed_namespace_free(compiled.lowered[e]) != unnamed_namespace_free(m)]
    if changed:
        raise SwapRefused(f"the signature of {', '.join(changed)} changed; the launchers "
                          "must be compiled again")
    return compiled, exprs


def swap(op, opts: dict | None = None, texts: dict[Path, bytes] | None = None) -> list[str]:
    """Compile the kernels the op launched from its ``.cu`` as it is now and launch them
    from the next call on; every other kernel compiles at its first launch (:func:`pend`).
    Returns the name expressions compiled now. ``op``: a handle ``load`` returned, or the
    op's state (the load path's own swap). ``opts``: the build options the op was loaded
    with (``extra_cuda_cflags=...``), when any. ``texts``: the files the op compiles as
    the caller read them (read now when None)."""
    if not enabled():
        raise SwapRefused("JIT_LOADER_NVRTC=0")
    import torch

    started = time.perf_counter()
    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    op_dir = Path(getattr(op, "op_dir", None) or op.path)
    lib = op_library(op)
    in_use = launched(op)
    exprs: dict[str, str] = {}
    cached = True
    if in_use:
        compiled, exprs = compile_in_use(op.name, op_dir, in_use, f"{major}.{minor}", opts)
        cached = compiled.cached
    else:  # nothing launched yet: compile_in_use's checks, on what a launch asks for
        _single_cu(op.name, op_dir)
    compiled_at = time.perf_counter()
    if exprs:
        module = _load(compiled.image, device)
        functions = {e: _function(module, compiled.lowered[e], device) for e in exprs}
        for expr, mangled in exprs.items():
            if not lib.jit_loader_kernel_replace(mangled.encode(), functions[expr], device):
                raise JitLoaderError(f"op {op.name!r}: kernel {expr} vanished from its table")
    pend(op, opts, texts if texts is not None else cu_texts(op_dir, opts))
    LAST_SWAP.clear()
    LAST_SWAP.update(op=op.name, kernels=len(exprs), compile_s=compiled_at - started,
                     install_s=time.perf_counter() - compiled_at, cached=cached)
    return list(exprs)


def _single_cu(name: str, op_dir: Path) -> Path:
    cus = sorted(Path(op_dir).glob("*.cu"))
    if len(cus) != 1:
        raise SwapRefused(f"op {name!r} has {len(cus)} .cu files; the swap handles one")
    return cus[0]


def cu_texts(op_dir: Path, opts: dict | None) -> dict[Path, bytes]:
    """The op's ``.cu`` and every local header it includes, as they are now."""
    cu = _single_cu(Path(op_dir).name, op_dir)
    files = [cu, *sources.local_headers([cu], sources.include_dirs(Path(op_dir), opts or {}))]
    return {p: p.read_bytes() for p in files}


def pend(op, opts: dict | None, texts: dict[Path, bytes]) -> None:
    """From now on, a kernel of the op's library that has no replacement for the current
    device is compiled with NVRTC at its launch (that instantiation, for that device's arch,
    cached by content) from the sources ``texts`` holds, the ones the loader loaded: the
    library's own kernels are older. Should the files differ from ``texts`` by then (edited
    again, not loaded yet), that launch fails and the log says to load; it never runs code
    older or newer than what was loaded. ``track(op, False)`` ends it."""
    lib = op_library(op)
    name, op_dir = op.name, Path(getattr(op, "op_dir", None) or op.path)
    cu = _single_cu(name, op_dir)
    guard = threading.Lock()

    def compile_at_launch(mangled: bytes, device: int) -> int | None:
        try:
            with guard:
                return _compile_for_launch(name, op_dir, cu, opts, texts, mangled.decode(), device)
        except BaseException as e:  # noqa: BLE001 - the launch reports the failure
            logger.error("op %r: kernel %s was not compiled for its first launch since the "
                         "sources were loaded, so the launch fails: %s", name,
                         mangled.decode(errors="replace"), str(e).splitlines()[0] if str(e) else e)
            return None

    callback = _COMPILE_FN(compile_at_launch)
    _CALLBACKS.append(callback)
    lib.jit_loader_kernel_swap_pending(callback)


def _compile_for_launch(name: str, op_dir: Path, cu: Path, opts: dict | None,
                        texts: dict[Path, bytes], mangled: str, device: int) -> int:
    import torch

    now = {p: p.read_bytes() for p in texts if p.exists()}
    if now != texts:
        changed = sorted(p.name for p in texts if now.get(p) != texts[p])
        raise JitLoaderError(f"{', '.join(changed)} changed since the op was loaded; load it "
                             "again (jit_loader.load or op.reload())")
    major, minor = torch.cuda.get_device_capability(device)
    expr = nvrtc.name_expression(mangled)
    compiled = nvrtc.compile_for_op(name, op_dir, cu, [expr], opts=opts, arch=f"{major}.{minor}")
    if unnamed_namespace_free(compiled.lowered[expr]) != unnamed_namespace_free(mangled):
        raise SwapRefused(f"the signature of {expr} changed; the launchers must be compiled again")
    function = _function(_load(compiled.image, device), compiled.lowered[expr], device)
    return function.value
