"""Finding ops and their inputs: op folders, their sources, the local headers those
include, and a cheap snapshot (mtime, size) that tells whether any of them changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Callable, Iterable, Sequence

from jit_tools.errors import OpNotFoundError

# The bundled ops sit beside this package, in a clone and in an installed copy alike.
OPS_DIR = Path(__file__).resolve().parent.parent / "ops"
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu")
CUDA_SUFFIXES = (".cu",)
# C++ host code of the CUDA backend (device guard, stream, dtype dispatch, the
# TORCH_LIBRARY_IMPL(ns, CUDA, m) block) lives in "<anything>_cuda.cpp" beside the
# torch-free kernels in ".cu" files; like them it is compiled only when CUDA is built.
CUDA_HOST_SUFFIX = "_cuda"
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".inl")

_INCLUDE_RE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def is_op_dir(path: Path) -> bool:
    if not path.is_dir() or path.name.startswith((".", "_")) or path.name == "common":
        return False
    return any(p.suffix in SOURCE_SUFFIXES for p in path.iterdir())


def available_ops(root: str | os.PathLike | None = None) -> list[str]:
    """Names of the op folders under ``root`` (default: the bundled ops/)."""
    base = Path(root) if root else OPS_DIR
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if is_op_dir(p))


def resolve_op_dir(name_or_path: str | os.PathLike) -> Path:
    """The op folder of a name under ops/ or of a path (a folder, or a file in it)."""
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


def is_cuda_source(path: Path, op_name: str) -> bool:
    """A source built only with CUDA: a ``.cu`` file, or C++ host code of the CUDA
    backend named ``*_cuda.cpp`` (the op's main ``<op>.cpp`` never counts)."""
    if path.suffix in CUDA_SUFFIXES:
        return True
    return path.stem.endswith(CUDA_HOST_SUFFIX) and path.stem != op_name


def _skip_dir(name: str) -> bool:
    return name.startswith((".", "_")) or name == "build"


def walk(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of ``folder`` and its subfolders with these endings, in a stable order
    (hidden files and ``_``-, ``.``-prefixed and ``build`` folders left out)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not _skip_dir(d))
        for f in sorted(files):
            if f.endswith(suffixes) and not f.startswith("."):
                found.append(Path(root) / f)
    return found


def walk_sources(op_dir: Path) -> list[Path]:
    return walk(op_dir, SOURCE_SUFFIXES)


def op_sources(name: str, op_dir: Path, source_list: Sequence[Path] | None = None,
               ) -> tuple[list[Path], Callable[[Path], bool]]:
    """The sources of an op and which of them are built only with CUDA: the walk of its
    folder (``.cu`` files and ``*_cuda.cpp``), or an explicit list, cpp_extension's model,
    where only ``.cu`` files need CUDA, whatever the others are called."""
    if source_list is not None:
        return list(source_list), lambda p: p.suffix in CUDA_SUFFIXES
    return walk_sources(op_dir), lambda p: is_cuda_source(p, name)


def folder_sources(op_dir: Path, with_cuda: bool, name: str | None = None) -> list[Path]:
    """The sources a build of the op folder compiles: all of them with CUDA, else those
    that need no CUDA."""
    found, cuda_only = op_sources(name or Path(op_dir).name, Path(op_dir))
    return [p for p in found if with_cuda or not cuda_only(p)]


def include_dirs(op_dir: Path, opts: dict) -> list[Path]:
    """Where an op's ``#include "..."`` and ``<...>`` are looked for: its folder, ops/
    (``common/...``) and the build's extra include paths."""
    return [op_dir, OPS_DIR, *(Path(p).resolve() for p in opts.get("extra_include_paths", ()))]


_SCAN = threading.local()


@contextlib.contextmanager
def one_scan():
    """Within the block (in this thread), :func:`local_headers` reads and resolves each
    file's includes once: a load looks at the same sources for the key, the ABI and a
    kernel swap. Not across a build, during which files may change."""
    outer = getattr(_SCAN, "memo", None)
    if outer is None:
        _SCAN.memo = {}
    try:
        yield
    finally:
        if outer is None:
            _SCAN.memo = None


def _includes(path: Path, include_dirs: tuple[Path, ...]) -> list[Path] | None:
    """The local files ``path`` includes, resolved; None when it cannot be read."""
    memo = getattr(_SCAN, "memo", None)
    if memo is not None and (path, include_dirs) in memo:
        return memo[path, include_dirs]
    try:
        text = path.read_bytes()
    except OSError:
        found = None
    else:
        found = []
        for match in _INCLUDE_RE.finditer(text):
            name = match.group(1).decode(errors="replace")
            for base in (path.parent, *include_dirs):
                cand = base / name
                if cand.is_file():
                    found.append(cand.resolve())
                    break
    if memo is not None:
        memo[path, include_dirs] = found
    return found


def local_headers(sources: Iterable[Path], include_dirs: Sequence[Path]) -> list[Path]:
    """Headers reachable through #include from ``sources`` that live in local folders."""
    dirs = tuple(include_dirs)
    seen: set[Path] = set()
    stack = list(sources)
    headers: list[Path] = []
    while stack:
        for cand in _includes(stack.pop(), dirs) or ():
            if cand not in seen:
                seen.add(cand)
                headers.append(cand)
                stack.append(cand)
    return sorted(headers)


# What makes a C++ unit need torch: a torch (or Python) header, or a registration block
# (whose macros the loader's force-included registry header defines).
_TORCH_INCLUDE_RE = re.compile(
    rb'^\s*#\s*include\s*[<"](?:(?:torch|ATen|c10|caffe2|pybind11)/|Python\.h)', re.MULTILINE)
_REGISTERS_RE = re.compile(rb"TORCH_LIBRARY|PYBIND11_MODULE")
# The macros of ops/common/cpu_loops.h that instantiate an op's CPU loops per dtype, or
# put a unit's own definitions in one dtype's slice (OPS_CPU_SLICE_0..3).
_PER_DTYPE_RE = re.compile(rb"\b(?:OPS_INSTANTIATE_CPU_(?:UNARY|BINARY)|OPS_CPU_SLICE_[0-3])\b")
# How many objects such a unit compiles to (OPS_CPU_SLICE 0..3 of cpu_loops.h).
CPU_DTYPE_SLICES = 4


def torch_free(source: Path, include_dirs: Sequence[Path]) -> bool:
    """Whether a C++ unit is plain C++: neither it nor a local header it reaches includes a
    torch (or Python) header or registers with the dispatcher. The loader compiles such a
    unit without the precompiled torch headers and without its registry header (e.g. an
    op's CPU loops over common/cpu_loops.h: a tenth of a second of headers instead of
    about a second)."""
    for path in (source, *local_headers([source], include_dirs)):
        try:
            text = path.read_bytes()
        except OSError:
            return False
        if _TORCH_INCLUDE_RE.search(text) or _REGISTERS_RE.search(text):
            return False
    return True


def reaches(source: Path, header: str, include_dirs: Sequence[Path]) -> bool:
    """Whether a C++ unit includes the local header ``header`` (a path's tail, e.g.
    ``common/cpu_dispatch.h``), itself or through the local headers it reaches."""
    tail = Path(header).parts
    return any(p.parts[-len(tail):] == tail for p in local_headers([source], include_dirs))


def dtype_slices(source: Path) -> int:
    """How many objects a C++ unit compiles to: ``CPU_DTYPE_SLICES`` (one per dtype,
    side by side) for a unit that instantiates its CPU loops with cpu_loops.h's
    OPS_INSTANTIATE_CPU_UNARY/_BINARY or puts definitions in its OPS_CPU_SLICE_k, else 1."""
    try:
        return CPU_DTYPE_SLICES if _PER_DTYPE_RE.search(source.read_bytes()) else 1
    except OSError:
        return 1


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def surface_path(op_dir: Path, name: str) -> Path | None:
    """The op's Python surface ``<op>/<op>.py``, if it has one."""
    path = op_dir / f"{name}.py"
    return path if path.is_file() else None


NOT_SURFACES = ("__init__.py", "reference.py", "setup.py", "conftest.py")


def other_python_files(op_dir: Path) -> list[str]:
    """Python files of an op folder that could be a misnamed surface."""
    return sorted(p.name for p in op_dir.glob("*.py")
                  if p.name not in NOT_SURFACES and not p.name.startswith(("test_", "_")))


def subdirs(op_dir: Path) -> list[Path]:
    out = []
    for root, dirs, _files in os.walk(op_dir):
        dirs[:] = [d for d in dirs if not _skip_dir(d)]
        out.extend(Path(root) / d for d in dirs)
    return out


def snapshot(op_dir: Path | None, files: Iterable[Path], surface: Path | None) -> dict:
    """(mtime, size) of the op folder, its subfolders (a new file changes them), its
    inputs and its Python surface: comparing two costs stats, not hashes. Without
    ``op_dir`` (an explicit source list) only the files count."""
    snap = {}
    paths = [op_dir, *subdirs(op_dir)] if op_dir is not None else []
    paths += files
    if surface is not None:
        paths.append(surface)
    for p in paths:
        try:
            st = os.stat(p)
            snap[str(p)] = (st.st_mtime_ns, st.st_size)
        except OSError:
            snap[str(p)] = None
    return snap


def common_folder(files: Sequence[Path]) -> Path:
    """The deepest folder holding every file of ``files``."""
    return Path(os.path.commonpath([str(p.parent) for p in files]))


def snapshot_changed(snap: dict) -> bool:
    for path, old in snap.items():
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = None
        if now != old:
            return True
    return False
