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
    JIT_LOADER_CUDA        0 builds op folders without their CUDA sources (CPU only)
    JIT_LOADER_DEBUG       1 loads debug builds (load(..., debug=True))
    JIT_LOADER_CUDA_ARCH   CUDA arch list, e.g. "9.0" or "8.0;9.0+PTX"
                           (default: TORCH_CUDA_ARCH_LIST, else the visible GPUs,
                           else DEFAULT_CUDA_ARCH)
    JIT_LOADER_VERBOSE     1 streams the full compiler output
    JIT_LOADER_KEEP        builds kept per op in the cache (default 8)
    JIT_LOADER_MAX_SIZE    bound on the whole cache (e.g. "20G"; least recently used builds go)
    JIT_LOADER_COMPILE     "never": a load that would compile raises, naming what differs
    MAX_JOBS               parallel compile jobs (default: number of cores)

This module is the public API only; the work is done in the package ``jit_tools``
(ARCHITECTURE.md describes its modules). Messages go to the ``jit_loader`` logger.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from jit_tools import dropin as _dropin
from jit_tools import handle as _handle
from jit_tools import key as _keys
from jit_tools import pipeline as _pipeline
from jit_tools import prebuilt as _prebuilt
from jit_tools import registry as _registry
from jit_tools import sources as _sources
from jit_tools.builder.toolchain import (DEFAULT_CUDA_ARCH, cuda_arch_list, cuda_home, cxx_compiler,
                                         why_no_cuda)
from jit_tools.errors import BuildError, CacheError, JitLoaderError, OpNotFoundError
from jit_tools.fake import check_same_device, op_rules
from jit_tools.handle import ExtensionModule, Op
from jit_tools.key import DEFAULT_CFLAGS, DEFAULT_CUDA_CFLAGS, DEFAULT_LDFLAGS
from jit_tools.sources import OPS_DIR, available_ops
from jit_tools.state import BuildInfo, loaded_states as _loaded_states
from jit_tools.store import cache_dir
from jit_tools.usage import DEFAULT_KEEP

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
    "check_op",
    "bench",
    "check_same_device",
    "op_rules",
    "sanitize",
    "profile",
    "check_finite",
    "register_autograd_op",
    "fast_op",
    "Op",
    "BuildInfo",
    "JitLoaderError",
    "BuildError",
    "OpNotFoundError",
    "CacheError",
]

REPO_ROOT = Path(__file__).resolve().parent

ops_in = _registry.ops_in


def __getattr__(name: str):
    """``check`` and ``check_op`` are the tool's own functions (their signature and help are
    its): imported at their first use, not with the loader."""
    if name in ("check", "check_op"):
        from jit_tools.tools import check as tool
        value = globals()[name] = getattr(tool, name)
        return value
    raise AttributeError(f"module 'jit_loader' has no attribute {name!r}")
# Older names some scripts use; the public ones are why_no_cuda and ops_in.
_why_no_cuda = why_no_cuda
_ops_in = ops_in


def load(name_or_path: str | os.PathLike | None = None, sources: Sequence[str] | str | None = None,
         *, name: str | None = None, verbose: bool | None = None,
         extra_cflags: Sequence[str] | str | None = None,
         extra_cuda_cflags: Sequence[str] | str | None = None,
         extra_ldflags: Sequence[str] | str | None = None,
         extra_include_paths: Sequence[str] | str | None = None,
         cuda_arch: str | None = None, debug: bool | None = None, **torch_options):
    """Load an op: its native library (built or cached) and its Python surface.

    ``load("gelu")`` or ``load(path)``: the name of a folder under ops/ or the path of
    any op folder; returns an :class:`Op`. Calling it again checks for edited sources,
    headers and Python code and reloads what changed; the :class:`Op` always resolves
    to the newest build. ``with_cuda=False`` (or ``JIT_LOADER_CUDA=0``) builds the folder
    without its ``.cu`` and ``*_cuda.cpp`` files, under a key of its own: a CPU edit loop
    that never waits for nvcc; the op's CUDA calls raise saying so.

    ``load(name="lltm_cpp", sources=["lltm.cpp"], ...)``: the
    ``torch.utils.cpp_extension.load`` call, with torch's meaning of ``sources``,
    ``extra_cflags``, ``extra_cuda_cflags``, ``extra_ldflags``, ``extra_include_paths``,
    ``verbose``, ``with_cuda``, ``is_python_module``; returns the ``PYBIND11_MODULE``
    as a module whose functions always call the newest build (``is_python_module=False``:
    the library's path, its ops registered). Torch arguments this toolkit cannot honour
    raise :class:`JitLoaderError` naming them.

    The flags and ``cuda_arch`` (a CUDA arch list, e.g. ``"9.0"``) are part of the cache
    key: other flags are another build. ``debug=True`` (default: ``JIT_LOADER_DEBUG``)
    loads a debug build, a build of its own key: host code at ``-O0 -g``, device code with
    line info, asserts on and the checks of ``OPS_DEBUG`` (``ops/common/debug.h``); hot
    reload and kernel swaps keep building it. ``load(op)`` without it loads the release
    build again.
    """
    flags = dict(extra_cflags=_dropin.flags(extra_cflags),
                 extra_cuda_cflags=_dropin.flags(extra_cuda_cflags),
                 extra_ldflags=_dropin.flags(extra_ldflags),
                 extra_include_paths=_dropin.paths(extra_include_paths), cuda_arch=cuda_arch,
                 debug=debug)
    if sources is None and name is None:
        with_cuda = torch_options.pop("with_cuda", None)
        if torch_options:
            raise TypeError(f"load: {', '.join(sorted(torch_options))}: only with sources=[...] "
                            "(the torch.utils.cpp_extension form)")
        if name_or_path is None:
            raise TypeError("load: give an op folder name or path, or name= and sources=")
        return _handle.load_folder(name_or_path, verbose, with_cuda=with_cuda, **flags)
    if name is not None and name_or_path is not None:
        raise TypeError("load: give the name once (first argument or name=)")
    name = name if name is not None else os.fspath(name_or_path)
    if sources is None:
        raise TypeError(f"load(name={name!r}): sources=[...] is missing")
    source_files = _dropin.paths(sources)
    options = _dropin.unsupported(torch_options)
    is_python_module = options.pop("is_python_module", True)
    with_cuda = _dropin.check_with_cuda(options.pop("with_cuda", None), [Path(s) for s in source_files])
    if options:
        raise TypeError(f"load() got unexpected keyword arguments: {', '.join(sorted(options))}")
    state = _pipeline.load_sources(name, source_files, verbose, with_cuda=with_cuda, **flags)
    return _module_or_library(state, is_python_module)


def _debug(debug: bool | None) -> bool:
    """Whether a load builds for debugging (None: as ``JIT_LOADER_DEBUG`` says); an
    ahead-of-time library is a release build, never served for it."""
    return _keys.debug_default() if debug is None else bool(debug)


def _module_or_library(state, is_python_module: bool):
    if not is_python_module:
        return state.library
    if state.ext_module is None:
        raise JitLoaderError(
            f"{state.name!r} was built but defines no PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) to "
            "return: add one (load_inline: functions=[...]), or pass is_python_module=False and "
            "use its torch.ops")
    return ExtensionModule(state)


def load_library(name_or_path: str | os.PathLike, *, verbose: bool | None = None,
                 extra_cflags: Sequence[str] = (), extra_cuda_cflags: Sequence[str] = (),
                 extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
                 cuda_arch: str | None = None, debug: bool | None = None) -> Op:
    """Build (or fetch from the cache) and register an op's C++/CUDA library only.

    An op's Python surface calls this at import time; it returns at once when the
    library in this process is current.
    """
    op_dir = _sources.resolve_op_dir(name_or_path)
    if not _debug(debug) and _prebuilt.selected(op_dir):  # JIT_LOADER_PREBUILT: an ahead-of-time build instead
        return _prebuilt.load(op_dir)
    return Op(_pipeline.load_library(
        op_dir, verbose, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths, cuda_arch=cuda_arch,
        debug=debug))


def bench(fn, *args, **options):
    """Time ``fn(*args)`` against ``baselines={name: callable}`` (and their
    ``torch.compile``) with the benchmark suite's protocol; returns a result that prints as a
    table (jit_tools/tools/bench.py: ``bytes``, ``backward``, ``compile``, ``host_bound``)."""
    from jit_tools.tools.bench import bench as run  # a tool: imported only when used
    return run(fn, *args, **options)


def register_autograd_op(op: str, backward: str, args: Sequence[str],
                         gives: str | Sequence[str | None] | None = None, *,
                         lib: "torch.library.Library") -> str:
    """Make ``op`` differentiable through ``backward``, an op that computes its gradient.

    ``args`` names each argument of ``backward`` in ``op``'s terms: ``"grad"`` (or
    ``"grad[i]"``), ``"result"`` (``"result[i]"``), an input of ``op`` by name, or an
    input's sizes (``"input.shape"``, ``"input.shape[2:]"``, ``"input.shape[0]"``);
    ``gives`` names the input of ``op`` that receives each output of ``backward`` (default:
    its first tensor argument). E.g.
    ``register_autograd_op("sigmoid::forward", "sigmoid::backward", ["grad", "result"], lib=LIB)``.

    Served by the loader's C++ autograd kernel (no Python per call) where that shared
    piece is built, else by ``torch.library.register_autograd`` with the same gradients.
    The registration belongs to ``lib``, so it is withdrawn with it when the op reloads.
    Returns the path taken: ``"cpp"`` or ``"python"``.
    """
    from jit_tools import autograd
    return autograd.register(op, backward, args, gives, lib=lib)


def fast_op(overload):
    """``overload`` (e.g. ``torch.ops.ns.op.default``) as an op object whose calls from
    Python skip ``torch.ops``'s generic argument conversion: the loader's fast entry, a
    shared piece built once per torch build (``jit_tools/fastcall.py``). It is still an
    ``OpOverload`` to torch.compile, opcheck and autograd; where the entry is not built (yet)
    or the schema has a type it does not take, ``overload`` itself is returned."""
    from jit_tools import fastcall
    return fastcall.fast_op(overload)


def sanitize(fn, *args, tool: str = "memcheck", **options):
    """Run ``fn(*args)`` once in a fresh process under compute-sanitizer's ``tool``
    (``memcheck``, ``racecheck``, ``initcheck``, ``synccheck``) with the debug build of its
    op and PyTorch's caching allocator off; a report of each finding at the op's own
    ``file:line`` (``report.clean`` when there is none). ``fn``: ``op.my_op``, a
    ``torch.ops`` op, or a function importable by module and name. Options: ``backward``
    (default: where an argument requires grad), ``kwargs``, ``print_limit``, ``timeout``
    (jit_tools/tools/sanitize.py)."""
    from jit_tools.tools import sanitize as tool_module
    return tool_module.sanitize(fn, *args, tool=tool, **options)


def profile(fn, *args, **options):
    """Per kernel that ``fn(*args)`` launches: time, DRAM bandwidth and FLOP rate against
    the device's peaks, occupancy, registers, shared memory, launch configuration; through
    Nsight Compute in a fresh process where ``ncu`` is installed, else torch.profiler's
    kernel times (the report says what is missing). ``report.table()``, ``report.plot()``
    (a roofline); both show in Jupyter. Options: ``backward``, ``kwargs``, ``timeout``,
    ``clock_control``, ``use_ncu`` (jit_tools/tools/profile.py)."""
    from jit_tools.tools import profile as tool_module
    return tool_module.profile(fn, *args, **options)


def check_finite(namespaces=None):
    """``with jit_loader.check_finite(): ...``: each floating-point result of an op of
    ``namespaces`` (default: every op the loader loaded) is checked for NaN and Inf as the
    op returns it, forward and backward; the first raises ``NonFiniteError`` (a
    FloatingPointError) naming the op, the result and the first bad element. Reads every
    result: for debugging (jit_tools/tools/finite.py)."""
    from jit_tools.tools import finite
    return finite.check_finite(namespaces)


def load_inline(name: str, cpp_sources: Sequence[str] | str | None = None,
                cuda_sources: Sequence[str] | str | None = None,
                functions: Sequence[str] | dict | str | None = None, *,
                cpp_source: str | None = None, cuda_source: str | None = None,
                python_source: str | None = None, first_line: int = 1,
                source_name: str | None = None, verbose: bool | None = None,
                extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None,
                extra_include_paths=None, cuda_arch: str | None = None,
                debug: bool | None = None, **torch_options):
    """Build from source text.

    ``load_inline(name, cpp_sources, cuda_sources=None, functions=None, ...)``: the
    ``torch.utils.cpp_extension.load_inline`` call, same meaning (``torch/extension.h``
    prepended, ``functions`` bound with pybind11, ``with_pytorch_error_handling``,
    ``no_implicit_headers``); returns the module like :func:`load` with ``sources``.

    ``load_inline(name, cpp_source=..., cuda_source=..., python_source=...)``: an op
    folder from text (what ``%%jit_op`` uses); returns an :class:`Op`. The text is
    written to ``<cache>/_inline/<name>/`` with a ``#line`` directive, so compiler
    messages name ``source_name`` (default ``<name>.cpp``) and the line of the text,
    offset by ``first_line - 1``.
    """
    flags = dict(extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                 extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
                 cuda_arch=cuda_arch, verbose=verbose, debug=debug)
    if cpp_sources is None and cuda_sources is None and functions is None:
        if torch_options:
            raise TypeError(f"load_inline: {', '.join(sorted(torch_options))}: only with "
                            "cpp_sources (the torch.utils.cpp_extension form)")
        op_dir = _pipeline.write_inline(name, cpp_source or "", cuda_source or "",
                                        python_source=python_source, first_line=first_line,
                                        source_name=source_name)
        return load(op_dir, **flags)
    if cpp_source is not None or cuda_source is not None or python_source is not None:
        raise TypeError("load_inline: give either cpp_sources/cuda_sources/functions (torch's form) "
                        "or cpp_source/cuda_source/python_source (an op folder), not both")
    options = _dropin.unsupported(torch_options)
    texts = _dropin.inline_sources(
        cpp_sources, cuda_sources, functions,
        with_pytorch_error_handling=options.pop("with_pytorch_error_handling", True),
        no_implicit_headers=options.pop("no_implicit_headers", False))
    op_dir = _pipeline.write_inline_files(name, texts)
    return load(name=name, sources=[op_dir / f for f in texts], **flags, **options)


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


def load_ipython_extension(ipython) -> None:
    """``%load_ext jit_loader``: reload edited ops before every cell; ``%%jit_op`` magic."""
    from jit_tools.tools import notebook
    notebook.load_ipython_extension(ipython)


def unload_ipython_extension(ipython) -> None:
    from jit_tools.tools import notebook
    notebook.unload_ipython_extension(ipython)


if __name__ == "__main__":
    from jit_tools.tools.cli import main
    sys.exit(main())
