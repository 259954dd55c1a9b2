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

This module is the public API only; the work is done in the package ``jit_tools``
(ARCHITECTURE.md describes its modules). Messages go to the ``jit_loader`` logger.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from jit_tools import pipeline as _pipeline
from jit_tools import registry as _registry
from jit_tools.errors import BuildError, CacheError, JitLoaderError, OpNotFoundError
from jit_tools.handle import Op
from jit_tools.key import DEFAULT_CFLAGS, DEFAULT_CUDA_CFLAGS, DEFAULT_LDFLAGS
from jit_tools.sources import OPS_DIR, available_ops
from jit_tools.state import BuildInfo, loaded_states as _loaded_states
from jit_tools.store import DEFAULT_KEEP, cache_dir
from jit_tools.toolchain import (DEFAULT_CUDA_ARCH, cuda_arch_list, cuda_home, cxx_compiler,
                                 why_no_cuda)

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
    "check",
    "Op",
    "BuildInfo",
    "JitLoaderError",
    "BuildError",
    "OpNotFoundError",
    "CacheError",
]

REPO_ROOT = Path(__file__).resolve().parent

ops_in = _registry.ops_in
# Older names some scripts use; the public ones are why_no_cuda and ops_in.
_why_no_cuda = why_no_cuda
_ops_in = ops_in


def load(name_or_path: str | os.PathLike, *, verbose: bool | None = None,
         extra_cflags: Sequence[str] = (), extra_cuda_cflags: Sequence[str] = (),
         extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
         cuda_arch: str | None = None) -> Op:
    """Load an op: its native library (built or cached) and its Python surface.

    ``name_or_path`` is the name of a folder under ops/ or the path of any op folder.
    Calling it again checks for edited sources, headers and Python code and reloads
    what changed; the returned :class:`Op` always resolves to the newest build.
    """
    return Op(_pipeline.load(
        name_or_path, verbose, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths, cuda_arch=cuda_arch))


def load_library(name_or_path: str | os.PathLike, *, verbose: bool | None = None,
                 extra_cflags: Sequence[str] = (), extra_cuda_cflags: Sequence[str] = (),
                 extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
                 cuda_arch: str | None = None) -> Op:
    """Build (or fetch from the cache) and register an op's C++/CUDA library only.

    An op's Python surface calls this at import time; it returns at once when the
    library in this process is current.
    """
    return Op(_pipeline.load_library(
        name_or_path, verbose, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths, cuda_arch=cuda_arch))


def load_inline(name: str, cpp_source: str = "", cuda_source: str = "", *,
                python_source: str | None = None, first_line: int = 1,
                source_name: str | None = None, **kwargs) -> Op:
    """Build an op from source text (e.g. a notebook cell); errors point at its lines.

    The text is written to ``<cache>/_inline/<name>/`` with a ``#line`` directive, so
    compiler messages name ``source_name`` (default ``<name>.cpp``) and the line of the
    text, offset by ``first_line - 1``.
    """
    op_dir = _pipeline.write_inline(name, cpp_source, cuda_source, python_source=python_source,
                                    first_line=first_line, source_name=source_name)
    return load(op_dir, **kwargs)


def reload_changed(verbose: bool | None = None) -> list[str]:
    """Check every op this process loaded; rebuild and reload the edited ones.

    Returns the names of the ops that were reloaded. Raises the first BuildError (the
    other ops are still checked; the failed op keeps its previous build).
    """
    return _pipeline.reload_changed(verbose)


def loaded_ops() -> list[Op]:
    """Every op this process has loaded."""
    return [Op(s) for s in _loaded_states()]


def op_key(name_or_path: str | os.PathLike, **options) -> tuple[str, dict]:
    """The cache key and build configuration ``load`` would use now (builds nothing)."""
    return _pipeline.op_key(name_or_path, **options)


def cached_builds(name: str) -> list[dict]:
    """Manifests of the complete builds of op ``name`` in the cache, newest first.

    Each manifest gains ``path`` (its folder), ``in_use`` (a live process holds it)
    and ``valid`` (library present with the recorded size).
    """
    return _pipeline.cached_builds(name)


def build_in_use(entry: str | os.PathLike) -> bool:
    """True when some live process (this one included) holds the build folder open."""
    return _pipeline.build_in_use(entry)


def remove_build(entry: str | os.PathLike) -> bool:
    """Delete one cached build unless a live process holds it; True when removed."""
    return _pipeline.remove_build(entry)


def check(*args, **kwargs):
    """One-line correctness check of an op; see :func:`jit_tools.check.check`."""
    from jit_tools.check import check as _check
    return _check(*args, **kwargs)


def load_ipython_extension(ipython) -> None:
    """``%load_ext jit_loader``: reload edited ops before every cell; ``%%jit_op`` magic."""
    from jit_tools import notebook
    notebook.load_ipython_extension(ipython)


def unload_ipython_extension(ipython) -> None:
    from jit_tools import notebook
    notebook.unload_ipython_extension(ipython)


if __name__ == "__main__":
    from jit_tools.cli import main
    sys.exit(main())
