"""jit_loader: build, cache and hot-reload C++/CUDA PyTorch operators.

A thin layer over ``torch.utils.cpp_extension`` (its Ninja build files) that adds:

* a content-addressed cache: the key covers every source, every local header it
  includes, the compile flags, the CUDA arch list, the torch/CUDA/Python versions
  and the compilers, so a new process with unchanged inputs loads without
  running a compiler, and reverting an edit reuses the earlier build;
* hot reload in a live process: edit any ``.cpp``/``.cu``/``.h``/``.cuh`` of an op
  and the next ``load`` (or ``Op.reload``) runs the new code; ``TORCH_LIBRARY``
  registrations of the old build are withdrawn first, so reloading never trips
  the dispatcher's duplicate-registration check;
* incremental builds: one Ninja working directory per op and configuration,
  so editing one translation unit recompiles that unit only;
* locking with ``flock`` (released by the kernel when a process dies), so a
  killed build never leaves a lock that blocks the next load, and concurrent
  processes compile once;
* compile errors raised as :class:`BuildError` whose first line is the first
  compiler error as ``file:line: message``, with the path of the full log;
* a progress bar during real builds and silence on cache hits.

Usage::

    import jit_loader
    lltm = jit_loader.load("lltm")            # an op folder under ops/, or any path
    y = lltm.lltm(x, weights, bias, h, c)      # the op's Python surface, newest build
    torch.ops.lltm.forward(...)                # the dispatcher op itself

Environment variables:

    JIT_LOADER_CACHE       cache directory (default: $XDG_CACHE_HOME/jit_loader)
    JIT_LOADER_CUDA_ARCH   CUDA arch list, e.g. "9.0" or "8.0;9.0+PTX"
                           (default: TORCH_CUDA_ARCH_LIST, else the visible GPUs,
                           else DEFAULT_CUDA_ARCH)
    JIT_LOADER_VERBOSE     1 streams the full compiler output
    JIT_LOADER_KEEP        builds kept per op in the cache (default 8)
    MAX_JOBS               parallel compile jobs (default: number of cores)
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import types
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

__all__ = [
    "load",
    "load_library",
    "load_inline",
    "available_ops",
    "cache_dir",
    "cuda_arch_list",
    "reload_changed",
    "op_key",
    "cached_builds",
    "build_in_use",
    "remove_build",
    "loaded_ops",
    "Op",
    "JitLoaderError",
    "BuildError",
    "OpNotFoundError",
    "CacheError",
]

REPO_ROOT = Path(__file__).resolve().parent
OPS_DIR = REPO_ROOT / "ops"
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu")
CUDA_SUFFIXES = (".cu",)
# C++ host code of the CUDA backend (device guard, stream, dtype dispatch, the
# TORCH_LIBRARY_IMPL(ns, CUDA, m) block) lives in "<anything>_cuda.cpp" beside the
# torch-free kernels in ".cu" files; like them it is compiled only when CUDA is built.
CUDA_HOST_SUFFIX = "_cuda"
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".inl")
DEFAULT_CUDA_ARCH = "8.0;9.0+PTX"  # Ampere and Hopper, plus PTX newer GPUs can JIT
DEFAULT_CFLAGS = ("-O3", "-fopenmp")
DEFAULT_CUDA_CFLAGS = ("-O3", "-lineinfo")
# Link the C++ runtime that torch itself uses, by its soname. A compiler whose
# libstdc++.so development link is missing silently falls back to libstdc++.a, and a
# second, static copy of the C++ runtime inside an op crashes the first time it formats
# a number into a stream torch created (locale facets of two runtimes do not mix).
DEFAULT_LDFLAGS = ("-l:libstdc++.so.6",) if sys.platform.startswith("linux") else ()
DEFAULT_KEEP = 8
LOADER_FORMAT = 2  # bump when the cache layout or the support code changes meaning

# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


class JitLoaderError(RuntimeError):
    """Base class of every error the loader raises on purpose."""


class OpNotFoundError(JitLoaderError, LookupError):
    """No op folder of that name (the message lists the ones that exist)."""


class CacheError(JitLoaderError):
    """The cache directory cannot be used (missing permission, full disk...)."""


class _CorruptBuild(JitLoaderError):
    """A cached library exists but cannot be loaded; it has been discarded."""


class BuildError(JitLoaderError):
    """A compile or link failed.

    ``str(err).splitlines()[0]`` is the first compiler error as ``file:line: message``;
    ``err.log_path`` is the full build log; ``err.file``/``err.line`` locate it.
    """

    def __init__(self, message: str, *, log_path: str, file: str | None = None,
                 line: int | None = None, log: str = ""):
        super().__init__(message)
        self.log_path = log_path
        self.file = file
        self.line = line
        self.log = log


# --------------------------------------------------------------------------------------
# Support code compiled into every op
# --------------------------------------------------------------------------------------

# Force-included into every translation unit. It replaces the TORCH_LIBRARY macros by
# versions that only *record* the registration at load time; the glue below performs
# it when the loader asks and withdraws it before a newer build of the same op
# registers. That is what lets a changed op be loaded again in the same process.
_REGISTRY_HEADER = r"""
#pragma once
#include <torch/library.h>
#include <memory>
#include <optional>
#include <vector>

namespace jit_loader_detail {
struct Registration {
  torch::Library::Kind kind;
  const char* ns;
  std::optional<c10::DispatchKey> key;
  void (*init)(torch::Library&);
  const char* file;
  uint32_t line;
};
// Hidden visibility: one list per shared library, never merged across builds.
__attribute__((visibility("hidden"))) inline std::vector<Registration>& registrations() {
  static std::vector<Registration> list;
  return list;
}
__attribute__((visibility("hidden"))) inline std::vector<std::unique_ptr<torch::Library>>& live() {
  static std::vector<std::unique_ptr<torch::Library>> libs;
  return libs;
}
struct Deferred {
  explicit Deferred(Registration r) { registrations().push_back(r); }
};
}  // namespace jit_loader_detail

#undef TORCH_LIBRARY
#undef TORCH_LIBRARY_FRAGMENT
#undef _TORCH_LIBRARY_FRAGMENT
#undef TORCH_LIBRARY_IMPL
#undef _TORCH_LIBRARY_IMPL

#define TORCH_LIBRARY(ns, m)                                                        \
  static void TORCH_LIBRARY_init_##ns(torch::Library&);                             \
  static const ::jit_loader_detail::Deferred TORCH_LIBRARY_static_init_##ns(        \
      {torch::Library::DEF, C10_STRINGIZE(ns), std::nullopt,                        \
       &TORCH_LIBRARY_init_##ns, __FILE__, __LINE__});                               \
  void TORCH_LIBRARY_init_##ns(torch::Library& m)

#define TORCH_LIBRARY_FRAGMENT(ns, m) _TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _TORCH_LIBRARY_FRAGMENT(ns, m, uid)                                         \
  static void C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(            \
      torch::Library&);                                                              \
  static const ::jit_loader_detail::Deferred C10_CONCATENATE(                       \
      TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)(                             \
      {torch::Library::FRAGMENT, C10_STRINGIZE(ns), std::nullopt,                   \
       &C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid), __FILE__,        \
       __LINE__});                                                                   \
  void C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(torch::Library & m)

#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _TORCH_LIBRARY_IMPL(ns, k, m, uid)                                          \
  static void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(          \
      torch::Library&);                                                              \
  static const ::jit_loader_detail::Deferred C10_CONCATENATE(                       \
      TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)(                           \
      {torch::Library::IMPL, C10_STRINGIZE(ns),                                      \
       std::make_optional(c10::DispatchKey::k),                                      \
       &C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid), __FILE__,      \
       __LINE__});                                                                   \
  void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(torch::Library & m)
"""

_GLUE_SOURCE = r"""
// Entry points the loader calls through ctypes (see jit_loader.py).
#include <cstring>
#include <exception>
#include <string>

extern "C" {

// Withdraw every registration of this library, newest first.
__attribute__((visibility("default"))) void jit_loader_unregister() {
  auto& libs = jit_loader_detail::live();
  while (!libs.empty()) libs.pop_back();
}

// Perform the recorded registrations; on failure withdraw them and copy the message.
__attribute__((visibility("default"))) int jit_loader_register(char* error, size_t size) {
  try {
    for (const auto& r : jit_loader_detail::registrations()) {
      jit_loader_detail::live().push_back(
          std::make_unique<torch::Library>(r.kind, r.ns, r.key, r.file, r.line));
      r.init(*jit_loader_detail::live().back());
    }
    return 0;
  } catch (const std::exception& e) {
    jit_loader_unregister();
    std::strncpy(error, e.what(), size - 1);
    error[size - 1] = '\0';
    return 1;
  }
}

// Space-separated namespaces this library registers into.
__attribute__((visibility("default"))) const char* jit_loader_namespaces() {
  static std::string names;
  names.clear();
  for (const auto& r : jit_loader_detail::registrations()) {
    std::string ns = std::string(r.ns) + " ";
    if (names.find(" " + ns) == std::string::npos && names.rfind(ns, 0) != 0) names += ns;
  }
  return names.c_str();
}

}  // extern "C"
"""

_SUPPORT_HASH = hashlib.sha256((_REGISTRY_HEADER + _GLUE_SOURCE).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------
# Environment: cache location, toolchain, arch list
# --------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Root of the build cache (``JIT_LOADER_CACHE``, else ``$XDG_CACHE_HOME/jit_loader``)."""
    env = os.environ.get("JIT_LOADER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "jit_loader"


def _verbose(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    return os.environ.get("JIT_LOADER_VERBOSE", "") not in ("", "0", "false", "False")


def _file_identity(path: str | None) -> str | None:
    """A cheap identity of a tool binary: its real path, size and mtime (no subprocess)."""
    if not path:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def cuda_home() -> str | None:
    """The CUDA toolkit whose nvcc builds ``.cu`` sources, or None when there is none."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            return home if os.path.isfile(os.path.join(home, "bin", "nvcc")) else None
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        if os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")):
            return home
    if os.path.isfile("/usr/local/cuda/bin/nvcc"):
        return "/usr/local/cuda"  # nvcc on PATH may be a wrapper script outside the toolkit
    return home if nvcc else None


def _why_no_cuda() -> str | None:
    """None when .cu sources can be built; else the reason, phrased for the user."""
    if torch.version.cuda is None:
        return f"the installed torch {torch.__version__} is not a CUDA build"
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and not os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return f"{var}={home} has no bin/nvcc; point {var} at a CUDA toolkit"
    if cuda_home() is None:
        return "nvcc was not found; install the CUDA toolkit or set CUDA_HOME"
    return None


def _pip_cuda_includes(home: str | None) -> list[str]:
    """Header folders of the CUDA libraries pip installed with torch (cuSPARSE, cuBLAS...).

    A toolkit that has nvcc but not the library headers ATen's CUDA headers include
    (a compiler-only install) builds with these, as torch's own wheels do.
    """
    if home and os.path.isfile(os.path.join(home, "include", "cusparse.h")):
        return []
    found = []
    for base in sys.path:
        nvidia = os.path.join(base, "nvidia")
        if not os.path.isdir(nvidia):
            continue
        for sub in sorted(os.listdir(nvidia)):
            inc = os.path.join(nvidia, sub, "include")
            if os.path.isdir(inc) and inc not in found:
                found.append(inc)
        if found:
            break
    return found


def cxx_compiler() -> str:
    return os.environ.get("CXX", "c++")


_ARCH_CACHE: dict[str, str] = {}


def cuda_arch_list(requested: str | None = None) -> str:
    """The CUDA arch list builds use: explicit, env, visible GPUs, else the default.

    With no GPU visible torch's own default would raise ``IndexError``; we fall back
    to DEFAULT_CUDA_ARCH so CUDA sources still compile (e.g. on a login node or in CI).
    """
    if requested:
        return requested
    env = os.environ.get("JIT_LOADER_CUDA_ARCH") or os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env and env != "native":
        return env
    if "auto" not in _ARCH_CACHE:
        arches: list[str] = []
        try:
            count = torch.cuda.device_count() if torch.version.cuda else 0
        except Exception:  # a broken driver is "no GPU" for this purpose
            count = 0
        for i in range(count):
            major, minor = torch.cuda.get_device_capability(i)
            arch = f"{major}.{minor}"
            if arch not in arches:
                arches.append(arch)
        if arches:
            arches.sort(key=lambda a: tuple(int(p) for p in a.split(".")))
            arches[-1] += "+PTX"
            _ARCH_CACHE["auto"] = ";".join(arches)
        else:
            _ARCH_CACHE["auto"] = DEFAULT_CUDA_ARCH
    return _ARCH_CACHE["auto"]


# --------------------------------------------------------------------------------------
# Finding ops and their inputs
# --------------------------------------------------------------------------------------


def _is_op_dir(path: Path) -> bool:
    if not path.is_dir() or path.name.startswith((".", "_")) or path.name == "common":
        return False
    return any(p.suffix in SOURCE_SUFFIXES for p in path.iterdir())


def available_ops(root: str | os.PathLike | None = None) -> list[str]:
    """Names of the op folders under ``root`` (default: this repository's ops/)."""
    base = Path(root) if root else OPS_DIR
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if _is_op_dir(p))


def _resolve_op_dir(name_or_path: str | os.PathLike) -> Path:
    text = os.fspath(name_or_path)
    candidate = Path(text).expanduser()
    looks_like_path = os.sep in text or text.startswith(".") or candidate.suffix in (
        SOURCE_SUFFIXES + (".py",))
    if looks_like_path or (candidate.is_dir() and not (OPS_DIR / text).is_dir()):
        if candidate.is_file():
            candidate = candidate.parent
        if not candidate.is_dir():
            raise OpNotFoundError(f"op folder {text!r} does not exist")
        return candidate.resolve()
    path = OPS_DIR / text
    if not path.is_dir():
        ops = ", ".join(available_ops()) or "(none)"
        raise OpNotFoundError(
            f"no op named {text!r} in {OPS_DIR}; available ops: {ops}. "
            "Pass a folder path to load an op that lives elsewhere.")
    return path.resolve()


_INCLUDE_RE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def _is_cuda_source(path: Path, op_name: str) -> bool:
    """A source built only with CUDA: a ``.cu`` file, or C++ host code of the CUDA
    backend named ``*_cuda.cpp`` (the op's main ``<op>.cpp`` never counts)."""
    if path.suffix in CUDA_SUFFIXES:
        return True
    return path.stem.endswith(CUDA_HOST_SUFFIX) and path.stem != op_name


def _walk_sources(op_dir: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(op_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")) and d != "build")
        for f in sorted(files):
            if f.endswith(SOURCE_SUFFIXES) and not f.startswith("."):
                found.append(Path(root) / f)
    return found


def _local_headers(sources: Iterable[Path], include_dirs: Sequence[Path]) -> list[Path]:
    """Headers reachable through #include from ``sources`` that live in local folders."""
    seen: set[Path] = set()
    stack = list(sources)
    headers: list[Path] = []
    while stack:
        path = stack.pop()
        try:
            text = path.read_bytes()
        except OSError:
            continue
        for match in _INCLUDE_RE.finditer(text):
            name = match.group(1).decode(errors="replace")
            for base in (path.parent, *include_dirs):
                cand = (base / name)
                if cand.is_file():
                    cand = cand.resolve()
                    if cand not in seen:
                        seen.add(cand)
                        headers.append(cand)
                        stack.append(cand)
                    break
    return sorted(headers)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------
# Per-process state
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class BuildInfo:
    """What the last load of an op did."""
    key: str
    library: str
    compiled: bool          # True when this call ran the compiler
    seconds: float          # wall time of the load (build included)
    log_path: str | None
    with_cuda: bool
    cuda_arch: str | None
    no_cuda_reason: str | None


@dataclasses.dataclass
class _OpState:
    name: str
    op_dir: Path
    options: dict
    snapshot: dict = dataclasses.field(default_factory=dict)
    key: str | None = None
    cdll: Any = None
    library: str | None = None
    namespaces: list[str] = dataclasses.field(default_factory=list)
    ext_module: types.ModuleType | None = None
    module: types.ModuleType | None = None
    module_name: str | None = None
    loader_libs: list = dataclasses.field(default_factory=list)
    info: BuildInfo | None = None
    held: Any = None  # open file whose shared flock marks the build as in use


_LOCK = threading.RLock()
_STATES: dict[Path, _OpState] = {}
_KEEPALIVE: dict[str, Any] = {}  # namespace -> torch.library.Library


def loaded_ops() -> list["Op"]:
    """Every op this process has loaded."""
    with _LOCK:
        return [Op(s) for s in _STATES.values()]


def _snapshot(state: _OpState, files: Iterable[Path]) -> dict:
    snap = {}
    paths = [state.op_dir, *(p for p in _subdirs(state.op_dir)), *files]
    surface = _surface_path(state)
    if surface is not None:
        paths.append(surface)
    for p in paths:
        try:
            st = os.stat(p)
            snap[str(p)] = (st.st_mtime_ns, st.st_size)
        except OSError:
            snap[str(p)] = None
    return snap


def _subdirs(op_dir: Path) -> list[Path]:
    out = []
    for root, dirs, _files in os.walk(op_dir):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_")) and d != "build"]
        out.extend(Path(root) / d for d in dirs)
    return out


def _snapshot_changed(snap: dict) -> bool:
    for path, old in snap.items():
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = None
        if now != old:
            return True
    return False


def _surface_path(state: _OpState) -> Path | None:
    path = state.op_dir / f"{state.name}.py"
    return path if path.is_file() else None


# --------------------------------------------------------------------------------------
# Keys and configuration
# --------------------------------------------------------------------------------------


def _config(state: _OpState, sources: list[Path]) -> dict:
    opts = state.options
    has_cuda_sources = any(_is_cuda_source(p, state.name) for p in sources)
    no_cuda = _why_no_cuda() if has_cuda_sources else None
    with_cuda = has_cuda_sources and no_cuda is None
    home = cuda_home() if with_cuda else None
    cuda_includes = [f"-isystem {d}" for d in _pip_cuda_includes(home)] if with_cuda else []
    return {
        "format": LOADER_FORMAT,
        "support": _SUPPORT_HASH,
        "name": state.name,
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "torch_cuda": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python": sysconfig.get_config_var("SOABI") or sys.version,
        "cxx": _file_identity(shutil.which(cxx_compiler())),
        "nvcc": _file_identity(os.path.join(home, "bin", "nvcc")) if home else None,
        "with_cuda": with_cuda,
        "cuda_arch": cuda_arch_list(opts.get("cuda_arch")) if with_cuda else None,
        "cflags": [*DEFAULT_CFLAGS, *cuda_includes, *opts.get("extra_cflags", ())],
        "cuda_cflags": [*DEFAULT_CUDA_CFLAGS, *cuda_includes, *opts.get("extra_cuda_cflags", ())]
        if with_cuda else [],
        "ldflags": [*DEFAULT_LDFLAGS, *opts.get("extra_ldflags", ())],
        "include_dirs": [str(p) for p in _include_dirs(state)],
        "no_cuda_reason": no_cuda,
    }


def _include_dirs(state: _OpState) -> list[Path]:
    dirs = [state.op_dir, OPS_DIR]
    dirs += [Path(p).resolve() for p in state.options.get("extra_include_paths", ())]
    return dirs


def _compute_key(state: _OpState) -> tuple[str, dict, list[Path], list[Path]]:
    all_sources = _walk_sources(state.op_dir)
    if not all_sources:
        raise JitLoaderError(
            f"op {state.name!r}: no C++/CUDA source ({', '.join(SOURCE_SUFFIXES)}) in {state.op_dir}")
    config = _config(state, all_sources)
    sources = [p for p in all_sources
               if config["with_cuda"] or not _is_cuda_source(p, state.name)]
    headers = _local_headers(all_sources, _include_dirs(state))
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for p in sorted(set(sources) | set(headers)):
        rel = os.path.relpath(p, state.op_dir) if p.is_relative_to(state.op_dir) else str(p)
        digest.update(f"\0{rel}\0{_sha256(p)}".encode())
    return digest.hexdigest()[:20], config, sources, [*all_sources, *headers]


# --------------------------------------------------------------------------------------
# The on-disk cache
# --------------------------------------------------------------------------------------


def _op_cache(name: str) -> Path:
    root = cache_dir()
    try:
        (root / name / "builds").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheError(
            f"cannot create the cache directory {root / name} ({e.strerror}); "
            "set JIT_LOADER_CACHE to a writable folder") from e
    if not os.access(root / name, os.R_OK | os.W_OK | os.X_OK):
        raise CacheError(
            f"the cache directory {root / name} is not readable and writable by this user; "
            "fix its permissions or set JIT_LOADER_CACHE to another folder")
    return root / name


def _entry_dir(name: str, key: str) -> Path:
    return cache_dir() / name / "builds" / key


def _valid_entry(name: str, key: str) -> dict | None:
    """The manifest of a complete build in the cache, or None.

    A build is complete only once its manifest exists (it is written last, and the
    folder appears by an atomic rename) and the library has the recorded size.
    """
    entry = _entry_dir(name, key)
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        lib = entry / manifest["library"]
        if lib.stat().st_size != manifest["size"]:
            return None
        return manifest
    except (OSError, ValueError, KeyError):
        return None


def _discard_entry(name: str, key: str) -> None:
    shutil.rmtree(_entry_dir(name, key), ignore_errors=True)


@contextlib.contextmanager
def _build_lock(name: str, quiet: bool):
    """Exclusive flock for building one op. The kernel drops it if this process dies,
    so there is never a stale lock to wait on."""
    path = _op_cache(name) / "build.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            if not quiet:
                print(f"jit_loader: waiting for process {holder or '?'} that is building "
                      f"{name!r}...", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield fd
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing releases the flock


def _hold(entry: Path):
    """Keep a shared flock on a build folder while this process uses it, so that
    cache cleaning can tell it is in use."""
    fd = os.open(entry / "manifest.json", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return os.fdopen(fd, "rb")


def _prune(name: str, keep_key: str) -> None:
    """Bound the number of builds kept per op (JIT_LOADER_KEEP), oldest first,
    skipping any build another process holds open."""
    try:
        keep = max(1, int(os.environ.get("JIT_LOADER_KEEP", DEFAULT_KEEP)))
    except ValueError:
        print(f"jit_loader: JIT_LOADER_KEEP={os.environ['JIT_LOADER_KEEP']!r} is not a number; "
              f"keeping {DEFAULT_KEEP} builds", file=sys.stderr)
        keep = DEFAULT_KEEP
    builds = cache_dir() / name / "builds"
    entries = []
    for entry in builds.iterdir():
        if entry.name.startswith(".tmp-"):
            # An unfinished copy of a process that died: remove if nobody writes it.
            if time.time() - entry.stat().st_mtime > 3600:
                shutil.rmtree(entry, ignore_errors=True)
            continue
        with contextlib.suppress(OSError):
            entries.append((entry.stat().st_mtime, entry))
    entries.sort(reverse=True)
    for _mtime, entry in entries[keep:]:
        if entry.name == keep_key:
            continue
        with contextlib.suppress(OSError):
            fd = os.open(entry / "manifest.json", os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use by a live process
            finally:
                os.close(fd)
            shutil.rmtree(entry, ignore_errors=True)


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------

_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$")
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$")


def _first_error(log: str, local_dirs: Sequence[Path]) -> tuple[str, int, str] | None:
    """First compiler error in the log, preferring one located in the user's files."""
    found = []
    for raw in log.splitlines():
        m = _GCC_ERROR.match(raw) or _NVCC_ERROR.match(raw)
        if m:
            found.append((m.group("file"), int(m.group("line")), m.group("msg").strip()))
    if not found:
        return None
    for file, line, msg in found:
        path = Path(file)
        if any(str(path).startswith(str(d) + os.sep) for d in local_dirs):
            return file, line, msg
    return found[0]


def _progress_unit(command: str) -> str:
    """The source file a Ninja command works on, for the progress bar."""
    m = re.search(r"-c (\S+)", command)
    if m:
        return os.path.basename(m.group(1))
    m = re.search(r"-o (\S+)", command)
    return "link " + os.path.basename(m.group(1)) if m else command[:40]


def _cpp_extension():
    """torch.utils.cpp_extension, imported quietly (it warns when CUDA_HOME is unset)."""
    if "torch.utils.cpp_extension" not in sys.modules and "CUDA_HOME" not in os.environ:
        home = cuda_home()
        if home:
            os.environ["CUDA_HOME"] = home
            try:
                from torch.utils import cpp_extension
            finally:
                del os.environ["CUDA_HOME"]
    from torch.utils import cpp_extension
    return cpp_extension


def _write_ninja_file(state: _OpState, config: dict, sources: list[Path], work: Path) -> None:
    cx = _cpp_extension()

    support = work / "_jit_loader"
    support.mkdir(exist_ok=True)
    header = support / "jit_loader_registry.h"
    glue = support / "_jit_loader_glue.cpp"
    for path, text in ((header, _REGISTRY_HEADER), (glue, _GLUE_SOURCE)):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)

    names = {}
    for src in sources:
        stem = src.stem + (".cuda" if src.suffix in CUDA_SUFFIXES else "")
        if stem in names:
            raise JitLoaderError(
                f"op {state.name!r}: sources {names[stem]} and {src} would both compile to "
                f"{stem}.o; rename one of them")
        names[stem] = src
    force = [f"-include {header}"]
    cflags = [*force, *config["cflags"]]
    cuda_cflags = [*force, *config["cuda_cflags"]]
    ldflags = [*config["ldflags"]]
    if "-fopenmp" in config["cflags"]:
        ldflags.append("-fopenmp")

    env_backup = {k: os.environ.get(k) for k in ("TORCH_CUDA_ARCH_LIST",)}
    home_backup = cx.CUDA_HOME
    try:
        if config["with_cuda"]:
            os.environ["TORCH_CUDA_ARCH_LIST"] = config["cuda_arch"]
            cx.CUDA_HOME = cuda_home()
        ldflags = cx._prepare_ldflags(ldflags, config["with_cuda"], False, False, False)
        cx._write_ninja_file_to_build_library(
            path=str(work / "build.ninja"),
            name=state.name,
            sources=[str(s) for s in [*sources, glue]],
            extra_cflags=cflags,
            extra_cuda_cflags=cuda_cflags,
            extra_sycl_cflags=[],
            extra_ldflags=ldflags,
            extra_include_paths=config["include_dirs"],
            with_cuda=config["with_cuda"],
            with_sycl=False,
            is_standalone=False,
        )
    finally:
        cx.CUDA_HOME = home_backup
        for k, v in env_backup.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ninja_preexec() -> None:
    # If this process dies (SIGKILL, OOM), Ninja gets SIGTERM, stops its compilers and
    # deletes their partial outputs instead of running on as an orphan.
    ctypes.CDLL(None).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def _run_ninja(state: _OpState, work: Path, verbose: bool, lock_fd: int) -> str:
    """Run Ninja in ``work``; progress bar from its [k/n] lines; returns the log path.

    Ninja and its compilers inherit the build lock's descriptor, so the flock stays
    held until the last of them exits: a process that takes over after this one was
    killed never races a compiler still writing into the same folder.
    """
    log_path = work / "build.log"
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    cmd = ["ninja", "-v", "-j", jobs]
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
    bar = None
    if not verbose:
        import warnings

        with warnings.catch_warnings():  # "IProgress not found" in a notebook without ipywidgets
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
        bar = tqdm(total=1, desc=f"building {state.name}", unit="step", leave=False,
                   file=sys.stderr, dynamic_ncols=True)
    try:
        proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, text=True, errors="replace", start_new_session=True,
                                pass_fds=(lock_fd,), preexec_fn=_ninja_preexec)
    except FileNotFoundError as e:
        if bar is not None:
            bar.close()
        raise JitLoaderError("ninja was not found; pip install ninja") from e
    lines: list[str] = []
    try:
        with open(log_path, "w") as log:
            for line in proc.stdout:
                log.write(line)
                lines.append(line)
                if verbose:
                    print(line, end="", flush=True)
                elif bar is not None:
                    m = _NINJA_STATUS.match(line)
                    if m:
                        done, total = int(m.group(1)), int(m.group(2))
                        bar.total = total
                        bar.n = done  # Ninja reports a step when it finishes
                        bar.set_postfix_str(_progress_unit(m.group(3)), refresh=False)
                        bar.refresh()
        proc.wait()
    except BaseException:
        # Ctrl-C or any error: stop the whole compiler tree, leave no orphan writing.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)  # Ninja stops its compilers and removes partial outputs
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        proc.wait()
        raise
    finally:
        if bar is not None:
            bar.close()
    if proc.returncode != 0:
        log = "".join(lines)
        err = _first_error(log, _include_dirs(state))
        if err:
            file, line, msg = err
            first = f"{file}:{line}: {msg}"
        else:
            failed = [l.strip() for l in lines
                      if re.search(r"error|undefined reference|cannot find", l, re.IGNORECASE)
                      and not l.startswith(("FAILED", "ninja:", "collect2"))]
            first = failed[0] if failed else f"ninja exited with status {proc.returncode}"
            file = line = None
        if "No space left on device" in log:
            first += f"  [disk full: free space in {cache_dir()} or set JIT_LOADER_CACHE]"
        tail = "".join(lines[-30:])
        raise BuildError(
            f"{first}\nbuilding op {state.name!r} failed; full log: {log_path}\n{tail}",
            log_path=str(log_path), file=file, line=line, log=log)
    return str(log_path)


def _build(state: _OpState, key: str, config: dict, sources: list[Path], verbose: bool,
           lock_fd: int) -> tuple[dict, str]:
    """Compile in the op's Ninja working folder, then publish the library into the
    content-addressed store by an atomic rename. Caller holds the build lock."""
    cfg = {k: v for k, v in config.items() if k != "no_cuda_reason"}
    tag = hashlib.sha256((json.dumps(cfg, sort_keys=True) + str(state.op_dir)).encode()).hexdigest()[:12]
    work = cache_dir() / state.name / f"work-{tag}"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        _write_ninja_file(state, config, sources, work)
        log_path = _run_ninja(state, work, verbose, lock_fd)
        built = work / f"{state.name}.so"
        tmp = cache_dir() / state.name / "builds" / f".tmp-{key}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        shutil.copy2(built, tmp / built.name)
        shutil.copy2(log_path, tmp / "build.log")
        manifest = {
            "key": key,
            "name": state.name,
            "op_dir": str(state.op_dir),
            "library": built.name,
            "size": (tmp / built.name).stat().st_size,
            "sources": [str(s) for s in sources],
            "config": config,
            "created": time.time(),
            "build_seconds": round(time.perf_counter() - started, 3),
        }
        with open(tmp / "manifest.json", "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        entry = _entry_dir(state.name, key)
        shutil.rmtree(entry, ignore_errors=True)  # an invalid (e.g. truncated) one
        os.rename(tmp, entry)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CacheError(
                f"disk full while building op {state.name!r} in {cache_dir()}: free space "
                "or point JIT_LOADER_CACHE elsewhere (the cache was left consistent)") from e
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise CacheError(
                f"cannot write to the cache {cache_dir()} ({e.strerror}: {e.filename}); "
                "set JIT_LOADER_CACHE to a writable folder") from e
        raise
    finally:
        for stale in (cache_dir() / state.name / "builds").glob(f".tmp-{key}-{os.getpid()}"):
            shutil.rmtree(stale, ignore_errors=True)
    return manifest, log_path


# --------------------------------------------------------------------------------------
# Registering a build with the dispatcher
# --------------------------------------------------------------------------------------


def _open_library(path: Path):
    lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    for fn in ("jit_loader_register", "jit_loader_unregister", "jit_loader_namespaces"):
        if not hasattr(lib, fn):
            raise JitLoaderError(f"{path} was not built by jit_loader (no {fn})")
    lib.jit_loader_register.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.jit_loader_register.restype = ctypes.c_int
    lib.jit_loader_namespaces.restype = ctypes.c_char_p
    return lib


def _register(lib) -> None:
    buf = ctypes.create_string_buffer(8192)
    if lib.jit_loader_register(buf, len(buf)) != 0:
        raise JitLoaderError("registering the op with the dispatcher failed: "
                             + buf.value.decode(errors="replace"))


def _ops_in(namespace: str) -> list[str]:
    prefix = namespace + "::"
    return sorted({n[len(prefix):] for n in torch._C._dispatch_get_all_op_names()
                   if n.startswith(prefix)})


def _keepalive(namespaces: Iterable[str]) -> None:
    """Hold one harmless registration per op so the dispatcher never frees an operator
    entry between withdrawing an old build and registering the new one: Python code
    may hold ``torch.ops.ns.op.default`` objects that point at it."""
    for ns in namespaces:
        lib = _KEEPALIVE.get(ns)
        if lib is None:
            lib = _KEEPALIVE[ns] = torch.library.Library(ns, "FRAGMENT")
            lib._jit_ops = set()
        for op in _ops_in(ns):
            if op in lib._jit_ops:
                continue
            with contextlib.suppress(RuntimeError):
                lib.impl(op, _keepalive_kernel, "PrivateUse3")
                lib._jit_ops.add(op)


def _keepalive_kernel(*args, **kwargs):
    raise NotImplementedError("jit_loader keep-alive kernel (PrivateUse3) is never used")


def _clear_ops_cache(namespaces: Iterable[str]) -> None:
    """Drop cached torch.ops.ns.op packets so the next access sees the new schema."""
    for ns in namespaces:
        if ns not in vars(torch.ops):
            continue
        namespace = getattr(torch.ops, ns)
        for name in list(namespace._dir):
            if name in vars(namespace):
                delattr(namespace, name)
        namespace._dir.clear()


def _missing_cuda_kernels(state: _OpState, reason: str) -> None:
    """Built without CUDA: make CUDA calls fail with the reason instead of a generic
    'could not run ... with arguments from the CUDA backend'."""
    for ns in state.namespaces:
        lib = torch.library.Library(ns, "FRAGMENT")
        for op in _ops_in(ns):
            if not torch._C._dispatch_has_kernel_for_dispatch_key(f"{ns}::{op}", "CPU"):
                continue

            def kernel(*args, _name=f"{ns}::{op}", **kwargs):
                raise RuntimeError(
                    f"{_name} has no CUDA kernel: op {state.name!r} was built for CPU only "
                    f"because {reason}. Reload after fixing that to get the CUDA kernels.")
            with contextlib.suppress(RuntimeError):
                lib.impl(op, kernel, "CUDA")
        state.loader_libs.append(lib)


def _destroy_module_libraries(module: types.ModuleType | None) -> None:
    """Withdraw the Python-side registrations (fake kernels, autograd) an op's Python
    module made through module-level ``torch.library.Library`` objects."""
    if module is None:
        return
    for value in list(vars(module).values()):
        if isinstance(value, torch.library.Library):
            value._destroy()


def _import_surface(state: _OpState) -> None:
    """(Re-)execute the op's Python surface ``<op>/<op>.py`` if it has one."""
    path = _surface_path(state)
    if path is None:
        state.module = None
        return
    _destroy_module_libraries(state.module)
    if state.op_dir.parent == OPS_DIR.resolve() and (OPS_DIR / "__init__.py").is_file():
        name = f"ops.{state.name}.{state.name}"
    else:
        name = f"_jit_ops_{state.name}_{hashlib.sha256(str(state.op_dir).encode()).hexdigest()[:8]}"
    state.module_name = name
    existing = sys.modules.get(name)
    if existing is not None and state.module is None:
        state.module = existing  # imported directly before load(); it is current
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if state.module is not None:
            sys.modules[name] = state.module
        else:
            sys.modules.pop(name, None)
        raise
    state.module = module


def _activate(state: _OpState, manifest: dict, key: str) -> None:
    """Make the build ``key`` the live one: withdraw the old registrations, register
    the new ones; on failure put the old build back."""
    entry = _entry_dir(state.name, key)
    so = entry / manifest["library"]
    try:
        lib = _open_library(so)
    except OSError as e:
        _discard_entry(state.name, key)  # truncated or corrupt: the caller rebuilds
        raise _CorruptBuild(f"the cached library {so} could not be loaded ({e})") from e
    namespaces = lib.jit_loader_namespaces().decode().split()
    old = state.cdll
    if old is not None:
        _keepalive(state.namespaces)
        for l in state.loader_libs:
            l._destroy()
        state.loader_libs.clear()
        _destroy_module_libraries(state.module)
        old.jit_loader_unregister()
    try:
        _register(lib)
    except JitLoaderError:
        if old is not None:
            _register(old)
            _clear_ops_cache(state.namespaces)
            _import_surface(state)
        raise
    state.cdll, state.library, state.key, state.namespaces = lib, str(so), key, namespaces
    _keepalive(namespaces)
    _clear_ops_cache(namespaces)
    if state.held is not None:
        state.held.close()
    with contextlib.suppress(OSError):
        state.held = _hold(entry)
    if hasattr(lib, f"PyInit_{state.name}"):
        # A dotted, per-build spec name: the init symbol stays PyInit_<name>, but
        # pybind11's per-interpreter module cache (keyed by spec name) misses, so
        # the new build really initialises instead of handing back the old module.
        spec = importlib.util.spec_from_file_location(f"_jit_build_{key}.{state.name}", so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        state.ext_module = module
    no_cuda = manifest["config"].get("no_cuda_reason")
    if no_cuda and namespaces:
        _missing_cuda_kernels(state, no_cuda)


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------


def _state_for(op_dir: Path, options: dict) -> _OpState:
    state = _STATES.get(op_dir)
    if state is None:
        state = _STATES[op_dir] = _OpState(name=op_dir.name, op_dir=op_dir, options=options)
    elif options and options != state.options:
        state.options = options
        state.snapshot = {}  # new flags: recompute the key
    return state


def _ensure_current(state: _OpState, verbose: bool | None) -> bool:
    """Bring the op's native library up to date. Returns True when it changed."""
    if state.snapshot and not _snapshot_changed(state.snapshot):
        return False
    started = time.perf_counter()
    key, config, sources, inputs = _compute_key(state)
    snapshot = _snapshot(state, inputs)
    if key == state.key:
        state.snapshot = snapshot
        return False
    compiled = False
    log_path = None
    for attempt in range(2):
        manifest = _valid_entry(state.name, key)
        if manifest is None:
            _op_cache(state.name)
            with _build_lock(state.name, quiet=False) as lock_fd:
                manifest = _valid_entry(state.name, key)  # another process may have built it
                if manifest is None:
                    manifest, log_path = _build(state, key, config, sources, _verbose(verbose),
                                                lock_fd)
                    compiled = True
                    with contextlib.suppress(OSError):
                        _prune(state.name, key)
        try:
            _activate(state, manifest, key)
            break
        except _CorruptBuild as e:
            if attempt == 1:
                raise
            print(f"jit_loader: {e}; rebuilding", file=sys.stderr)
    state.snapshot = snapshot
    state.info = BuildInfo(
        key=key, library=state.library, compiled=compiled,
        seconds=time.perf_counter() - started, log_path=log_path,
        with_cuda=config["with_cuda"], cuda_arch=config["cuda_arch"],
        no_cuda_reason=config["no_cuda_reason"])
    if config["no_cuda_reason"] and compiled:
        print(f"jit_loader: built {state.name!r} for CPU only: {config['no_cuda_reason']}",
              file=sys.stderr)
    return True


def load_library(name_or_path: str | os.PathLike, *, verbose: bool | None = None,
                 extra_cflags: Sequence[str] = (), extra_cuda_cflags: Sequence[str] = (),
                 extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
                 cuda_arch: str | None = None) -> "Op":
    """Build (or fetch from the cache) and register an op's C++/CUDA library only.

    An op's Python surface calls this at import time; it returns at once when the
    library in this process is current.
    """
    op_dir = _resolve_op_dir(name_or_path)
    from jit_tools import prebuilt  # JIT_LOADER_PREBUILT: an ahead-of-time build instead
    if prebuilt.selected(op_dir):
        return prebuilt.load(op_dir)
    options = _options(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, cuda_arch)
    with _LOCK:
        state = _state_for(op_dir, options)
        _ensure_current(state, verbose)
        return Op(state)


def _options(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, cuda_arch) -> dict:
    opts = {}
    if extra_cflags:
        opts["extra_cflags"] = list(extra_cflags)
    if extra_cuda_cflags:
        opts["extra_cuda_cflags"] = list(extra_cuda_cflags)
    if extra_ldflags:
        opts["extra_ldflags"] = list(extra_ldflags)
    if extra_include_paths:
        opts["extra_include_paths"] = [str(Path(p).resolve()) for p in extra_include_paths]
    if cuda_arch:
        opts["cuda_arch"] = cuda_arch
    return opts


def load(name_or_path: str | os.PathLike, *, verbose: bool | None = None,
         extra_cflags: Sequence[str] = (), extra_cuda_cflags: Sequence[str] = (),
         extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
         cuda_arch: str | None = None) -> "Op":
    """Load an op: its native library (built or cached) and its Python surface.

    ``name_or_path`` is the name of a folder under ops/ or the path of any op folder.
    Calling it again checks for edited sources, headers and Python code and reloads
    what changed; the returned :class:`Op` always resolves to the newest build.
    """
    op_dir = _resolve_op_dir(name_or_path)
    from jit_tools import prebuilt
    if prebuilt.selected(op_dir):
        return prebuilt.load(op_dir, surface=True)
    options = _options(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, cuda_arch)
    with _LOCK:
        state = _state_for(op_dir, options)
        _refresh(state, verbose)
        return Op(state)


def _refresh(state: _OpState, verbose: bool | None) -> bool:
    surface = _surface_path(state)
    surface_key = str(surface) if surface else None
    old_surface = state.snapshot.get(surface_key) if surface_key else None
    native_changed = _ensure_current(state, verbose)
    surface_changed = surface_key is not None and (
        state.module is None or old_surface != state.snapshot.get(surface_key))
    if native_changed or surface_changed:
        _import_surface(state)
    return native_changed or surface_changed


def reload_changed(verbose: bool | None = None) -> list[str]:
    """Check every op this process loaded; rebuild and reload the edited ones.

    Returns the names of the ops that were reloaded. Raises the first BuildError (the
    other ops are still checked; the failed op keeps its previous build).
    """
    changed, errors = [], []
    with _LOCK:
        for state in list(_STATES.values()):
            try:
                if _refresh(state, verbose):
                    changed.append(state.name)
            except JitLoaderError as e:
                errors.append(e)
    if errors:
        raise errors[0]
    return changed


def load_inline(name: str, cpp_source: str = "", cuda_source: str = "", *,
                python_source: str | None = None, first_line: int = 1,
                source_name: str | None = None, **kwargs) -> "Op":
    """Build an op from source text (e.g. a notebook cell); errors point at its lines.

    The text is written to ``<cache>/_inline/<name>/`` with a ``#line`` directive, so
    compiler messages name ``source_name`` (default ``<name>.cpp``) and the line of the
    text, offset by ``first_line - 1``.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"load_inline: name must be a C identifier, got {name!r}")
    op_dir = cache_dir() / "_inline" / name
    op_dir.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for suffix, text in ((".cpp", cpp_source), (".cu", cuda_source)):
        if text:
            label = source_name or f"{name}{suffix}"
            wanted[f"{name}{suffix}"] = f'#line {first_line} "{label}"\n{text}'
    if not wanted:
        raise ValueError("load_inline: give cpp_source or cuda_source")
    if python_source is not None:
        wanted[f"{name}.py"] = python_source
    for existing in op_dir.iterdir():
        if existing.is_file() and existing.name not in wanted:
            existing.unlink()
    for fname, text in wanted.items():
        path = op_dir / fname
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return load(op_dir, **kwargs)


def op_key(name_or_path: str | os.PathLike, **options) -> tuple[str, dict]:
    """The cache key and build configuration ``load`` would use now (builds nothing)."""
    op_dir = _resolve_op_dir(name_or_path)
    opts = _options(options.get("extra_cflags", ()), options.get("extra_cuda_cflags", ()),
                    options.get("extra_ldflags", ()), options.get("extra_include_paths", ()),
                    options.get("cuda_arch"))
    state = _OpState(name=op_dir.name, op_dir=op_dir, options=opts)
    key, config, _sources, _inputs = _compute_key(state)
    return key, config


def cached_builds(name: str) -> list[dict]:
    """Manifests of the complete builds of op ``name`` in the cache, newest first.

    Each manifest gains ``path`` (its folder), ``in_use`` (a live process holds it)
    and ``valid`` (library present with the recorded size).
    """
    builds = cache_dir() / name / "builds"
    out = []
    if not builds.is_dir():
        return out
    for entry in builds.iterdir():
        if entry.name.startswith(".tmp-"):
            continue
        try:
            manifest = json.loads((entry / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {"key": entry.name, "name": name, "created": entry.stat().st_mtime}
        manifest["path"] = str(entry)
        manifest["valid"] = _valid_entry(name, entry.name) is not None
        manifest["in_use"] = build_in_use(entry)
        out.append(manifest)
    out.sort(key=lambda m: m.get("created", 0), reverse=True)
    return out


def build_in_use(entry: str | os.PathLike) -> bool:
    """True when some live process (this one included) holds the build folder open."""
    entry = Path(entry)
    with _LOCK:
        for state in _STATES.values():
            if state.key == entry.name and state.name == entry.parent.parent.name:
                return True
    try:
        fd = os.open(entry / "manifest.json", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove_build(entry: str | os.PathLike) -> bool:
    """Delete one cached build unless a live process holds it; True when removed."""
    entry = Path(entry)
    if build_in_use(entry):
        return False
    shutil.rmtree(entry, ignore_errors=True)
    return not entry.exists()


class Op:
    """Handle on a loaded op; attribute access resolves to its newest build.

    ``op.<name>`` looks up the op's Python surface module first (functions,
    ``autograd.Function`` classes, ``nn.Module`` classes), then a pybind11 module it
    defines, then its dispatcher ops ``torch.ops.<namespace>.<name>``.
    """

    def __init__(self, state: _OpState):
        object.__setattr__(self, "_state", state)

    @property
    def name(self) -> str:
        return self._state.name

    @property
    def path(self) -> Path:
        return self._state.op_dir

    @property
    def namespaces(self) -> list[str]:
        return list(self._state.namespaces)

    @property
    def ops(self):
        """``torch.ops.<namespace>`` of this op (its first namespace)."""
        if not self._state.namespaces:
            raise AttributeError(f"op {self.name!r} registers no TORCH_LIBRARY namespace")
        return getattr(torch.ops, self._state.namespaces[0])

    @property
    def module(self) -> types.ModuleType | None:
        """The op's Python surface module (``<op>/<op>.py``), newest version."""
        return self._state.module

    @property
    def extension(self) -> types.ModuleType | None:
        """The pybind11 module, for ops built with ``PYBIND11_MODULE``."""
        return self._state.ext_module

    @property
    def library(self) -> str | None:
        return self._state.library

    @property
    def build(self) -> BuildInfo | None:
        return self._state.info

    def reload(self, verbose: bool | None = None) -> bool:
        """Rebuild and reload if any source, header or the Python surface changed."""
        with _LOCK:
            return _refresh(self._state, verbose)

    def __getattr__(self, attr: str):
        state = self._state
        for module in (state.module, state.ext_module):
            if module is not None and hasattr(module, attr):
                return getattr(module, attr)
        for ns in state.namespaces:
            if attr in _ops_in(ns):
                return getattr(getattr(torch.ops, ns), attr)
        names = sorted(
            {n for m in (state.module, state.ext_module) if m for n in vars(m) if not n.startswith("_")}
            | {n for ns in state.namespaces for n in _ops_in(ns)})
        raise AttributeError(f"op {state.name!r} has no attribute {attr!r}; it has: {', '.join(names)}")

    def __dir__(self):
        state = self._state
        names = set(super().__dir__())
        for m in (state.module, state.ext_module):
            if m is not None:
                names |= {n for n in vars(m) if not n.startswith("_")}
        for ns in state.namespaces:
            names |= set(_ops_in(ns))
        return sorted(names)

    def __repr__(self) -> str:
        key = self._state.key or "not built"
        return f"<jit_loader.Op {self.name!r} from {self.path} build {key}>"


# --------------------------------------------------------------------------------------
# IPython / command line entry points (implementations live in jit_tools/)
# --------------------------------------------------------------------------------------


def load_ipython_extension(ipython) -> None:
    """``%load_ext jit_loader``: reload edited ops before every cell; ``%%jit_op`` magic."""
    from jit_tools import notebook
    notebook.load_ipython_extension(ipython)


def unload_ipython_extension(ipython) -> None:
    from jit_tools import notebook
    notebook.unload_ipython_extension(ipython)


def check(*args, **kwargs):
    """One-line correctness check of an op; see :func:`jit_tools.check.check`."""
    from jit_tools.check import check as _check
    return _check(*args, **kwargs)


if __name__ == "__main__":
    from jit_tools.cli import main
    sys.exit(main())
