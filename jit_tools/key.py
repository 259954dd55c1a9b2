"""The cache key: one function of the build's inputs, computed apart from storage.

It covers every source and every local header it includes, the loader's C++ support
files, the compile and link flags, the CUDA arch list, the torch/CUDA/Python versions
and the compilers. Same inputs, same key: a new process or a reverted edit finds the
earlier build.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Callable, Sequence

import torch

from jit_tools import _torch_private, abi as abis, sources
from jit_tools.builder import toolchain
from jit_tools.errors import JitLoaderError

LOADER_FORMAT = 2  # bump when the cache layout changes meaning
DEFAULT_CFLAGS = ("-O3", "-fopenmp")
# nvcc's -O is the host compiler's level only (cicc and ptxas optimise device code at
# their own -O3 whatever it says); a .cu's host code is kernel launchers, and its compile
# is on the critical path of every .cu edit (ARCHITECTURE.md, "Shared build pieces").
DEFAULT_CUDA_CFLAGS = ("-O1", "-lineinfo")
# A debug build (load(..., debug=True), JIT_LOADER_DEBUG=1) in place of the defaults' -O:
# host code unoptimised with debug info, asserts on whatever NDEBUG the flags had, and
# OPS_DEBUG for the checks of ops/common/debug.h and launch.h. Device code keeps its
# optimisation and the defaults' -lineinfo: compute-sanitizer names source lines with it,
# and -G (extra_cuda_cflags, for cuda-gdb) would change the code being checked. Every
# flag here has an NVRTC twin, so a kernel swap compiles the same debug code.
DEBUG_CFLAGS = ("-O0", "-g", "-UNDEBUG", "-DOPS_DEBUG=1")
DEBUG_ENV = "JIT_LOADER_DEBUG"
# Link the C++ runtime that torch itself uses, by its soname. A compiler whose
# libstdc++.so development link is missing silently falls back to libstdc++.a, and a
# second, static copy of the C++ runtime inside an op crashes the first time it formats
# a number into a stream torch created (locale facets of two runtimes do not mix).
DEFAULT_LDFLAGS = ("-l:libstdc++.so.6",) if sys.platform.startswith("linux") else ()

CSRC = Path(__file__).resolve().parent / "csrc"
REGISTRY_HEADER = CSRC / "jit_loader_registry.h"
# The code both registry headers include: its bytes enter both ABIs' keys.
REGISTRY_CORE = CSRC / "jit_loader_registry_core.h"
SUPPORT_HASH = hashlib.sha256(REGISTRY_HEADER.read_bytes() + REGISTRY_CORE.read_bytes()).hexdigest()[:16]


def cpu_clone_flags() -> list[str]:
    """``-DOPS_CPU_CLONE=<0|1|2>``: a JIT build compiles only the clone of the ops'
    vectorised CPU loops that this process runs (ops/common/cpu_dispatch.h), ATen's CPU
    capability (ATEN_CPU_CAPABILITY honoured); in the key (the configuration's
    ``cpu_clone``), and on the command line of the units that reach cpu_dispatch.h only
    (ninja_file.units_of): a machine of another capability compiles those again, and takes
    ccache's hits and the same precompiled header for the others. None off
    x86-64 (one clone there anyway) and with JIT_LOADER_CPU_CLONES=all (a cache shared by
    machines of several capabilities)."""
    if os.environ.get("JIT_LOADER_CPU_CLONES", "").lower() == "all":
        return []
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    capability = torch.backends.cpu.get_cpu_capability().upper()
    return [f"-DOPS_CPU_CLONE={ {'AVX512': 2, 'AVX2': 1}.get(capability, 0) }"]


def registry_header(cfg: dict) -> Path:
    """The registry header force-included into the build's units (it also defines the
    loader's entry points), for the build's ABI."""
    return abis.STABLE_REGISTRY_HEADER if cfg.get("abi") == abis.STABLE else REGISTRY_HEADER


CUDA_ENV = "JIT_LOADER_CUDA"  # 0: op folders build without their CUDA sources


def debug_default() -> bool:
    """Whether a load that does not say builds for debugging: ``JIT_LOADER_DEBUG=1``."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def options(extra_cflags=(), extra_cuda_cflags=(), extra_ldflags=(), extra_include_paths=(),
            cuda_arch=None, with_cuda=None, debug=None) -> dict:
    """The build options of ``load`` as a canonical dict (empty ones left out).
    ``with_cuda=True`` builds with CUDA (include paths, arch list, CUDA libraries) even
    without a CUDA source, as torch's ``cpp_extension.load(with_cuda=True)`` does;
    ``with_cuda=False`` builds an op folder without its CUDA sources (a CPU-only build,
    another key). ``debug=True``: a debug build (DEBUG_CFLAGS), a build of its own key;
    None: ``JIT_LOADER_DEBUG`` decides."""
    opts = {}
    if debug or (debug is None and debug_default()):
        opts["debug"] = True
    if with_cuda is not None:
        opts["with_cuda"] = bool(with_cuda)
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


def cpu_only_reason(opts: dict, folder: bool = True) -> str | None:
    """Why a build leaves its CUDA sources out by request, else None: ``load(...,
    with_cuda=False)``, or for an op folder loaded without ``with_cuda``,
    ``JIT_LOADER_CUDA=0``. One text for both, so that both name one build."""
    off = opts.get("with_cuda") is False or (
        folder and "with_cuda" not in opts
        and os.environ.get(CUDA_ENV, "").strip().lower() in ("0", "false", "no", "off"))
    return f"a CPU-only build was asked for (with_cuda=False or {CUDA_ENV}=0)" if off else None


def config(name: str, op_dir: Path, opts: dict, all_sources: list[Path],
           cuda_only: Callable[[Path], bool] | None = None, abi: str = abis.ATEN,
           folder: bool = True) -> dict:
    """Everything besides file contents that decides what the build produces (``folder``:
    the sources are an op folder's, not a list given to ``load``)."""
    cuda_only = cuda_only or (lambda p: sources.is_cuda_source(p, name))
    cpu_only = cpu_only_reason(opts, folder)
    has_cuda_sources = opts.get("with_cuda", False) or any(cuda_only(p) for p in all_sources)
    no_cuda = (cpu_only or toolchain.why_no_cuda()) if has_cuda_sources else None
    with_cuda = has_cuda_sources and no_cuda is None
    home = toolchain.cuda_home() if with_cuda else None
    cuda_includes = ([f"-isystem {shlex.quote(d)}" for d in toolchain.pip_cuda_includes(home)]
                     if with_cuda else [])
    debug = bool(opts.get("debug"))
    cfg = {
        "format": LOADER_FORMAT,
        "support": SUPPORT_HASH,
        "name": name,
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "torch_cuda": torch.version.cuda,
        "cxx11_abi": _torch_private.cxx11_abi(),
        "python": sysconfig.get_config_var("SOABI") or sys.version,
        "cxx": toolchain.file_identity(shutil.which(toolchain.cxx_compiler())),
        "nvcc": toolchain.file_identity(os.path.join(home, "bin", "nvcc")) if home else None,
        "with_cuda": with_cuda,
        "cuda_arch": toolchain.cuda_arch_list(opts.get("cuda_arch")) if with_cuda else None,
        "cflags": [*_defaults(DEFAULT_CFLAGS, debug), *cuda_includes, *opts.get("extra_cflags", ())],
        "cpu_clone": cpu_clone_flags(),
        "cuda_cflags": [*_defaults(DEFAULT_CUDA_CFLAGS, debug), *cuda_includes,
                        *opts.get("extra_cuda_cflags", ())] if with_cuda else [],
        "ldflags": [*DEFAULT_LDFLAGS, *opts.get("extra_ldflags", ())],
        "include_dirs": [str(p) for p in sources.include_dirs(op_dir, opts)],
        "no_cuda_reason": no_cuda,
    }
    if cpu_only and has_cuda_sources:
        cfg["cpu_only"] = True  # asked for: its own key, even where a CUDA build is possible
    if debug:  # named in the key (and by `list`); a release build's configuration is unchanged
        cfg["debug"] = True
    return stable_config(cfg) if abi == abis.STABLE else cfg


def _defaults(flags: Sequence[str], debug: bool) -> list[str]:
    """The default flags of a build: ``flags``, or for a debug build its flags with
    DEBUG_CFLAGS in place of their optimisation level (nvcc warns about two -O)."""
    if not debug:
        return list(flags)
    return [*(f for f in flags if not f.startswith("-O")), *DEBUG_CFLAGS]


def stable_config(cfg: dict) -> dict:
    """A stable build's configuration: the stable registry header, the target
    version in place of the exact torch build (the library loads in every torch from
    the target on, so a prebuilt cache layer serves them all), and no Python ABI (a
    stable library uses none). torch's CUDA version stays where CUDA is built: the
    kernels link against its runtime."""
    out = dict(cfg, abi=abis.STABLE, support=abis.STABLE_SUPPORT_HASH, torch=abis.TARGET_NAME)
    del out["torch_git"], out["python"]
    if not out["with_cuda"]:
        out["torch_cuda"] = None
    out["cflags"] = [abis.TARGET_FLAG, *out["cflags"]]
    if out["with_cuda"]:
        out["cuda_cflags"] = [abis.TARGET_FLAG, *out["cuda_cflags"]]
    return out


def _portable_dir(path: str, op_dir: Path) -> str:
    """A folder as a key names it: relative to the op folder or to the repository where
    it lies inside one, so that two checkouts in different places agree."""
    p = Path(path)
    for base, prefix in ((Path(op_dir).resolve(), "<op>"), (sources.OPS_DIR.parent, "<repo>")):
        if p == base or p.is_relative_to(base):
            return str(Path(prefix) / p.relative_to(base))
    return str(p)


def key_view(cfg: dict, op_dir: Path) -> dict:
    """The part of a build's configuration its key names. An ATen build: all of it (its
    library runs only with the torch, compilers and paths it was built with). A stable
    build: what decides the library's code for its target version, so that a prebuilt
    cache layer made on one machine serves another: nvcc by the release it reports (not
    path, size and mtime; it decides the device code and the drivers that run it), not
    the C++ compiler (the library meets torch only through the stable C shim, so any
    compiler's build serves; one that needs a newer C++ runtime than the machine has fails
    to load and is rebuilt, pipeline._activate), the op's include folders relative to the op or
    the repository, no CUDA header folder of the Python environment (their contents come
    with torch's CUDA version and nvcc's release, which stay), and no reason for a
    missing CUDA (``with_cuda`` stays). The CUDA arch list stays: it decides the device
    code (ARCHITECTURE.md, "A prebuilt cache layer")."""
    if cfg.get("abi") != abis.STABLE:
        return cfg
    home = toolchain.cuda_home() if cfg["with_cuda"] else None
    out = dict(cfg)
    del out["cxx"]
    out["nvcc"] = toolchain.tool_version(os.path.join(home, "bin", "nvcc")) if home else None
    out["include_dirs"] = [_portable_dir(d, op_dir) for d in cfg["include_dirs"]]
    for flags in ("cflags", "cuda_cflags"):
        out[flags] = [f for f in cfg[flags] if not f.startswith("-isystem ")]
    del out["no_cuda_reason"]
    return out


def _portable_file(path: Path, op_dir: Path, stable: bool) -> str:
    if path.is_relative_to(op_dir):
        return os.path.relpath(path, op_dir)
    return _portable_dir(str(path), op_dir) if stable else str(path)


def input_hashes(files) -> dict[str, str]:
    """Content hash of each input file by real path (a missing file hashes to "")."""
    out = {}
    for p in files:
        real = os.path.realpath(p)
        try:
            out[real] = sources.sha256(Path(real))
        except OSError:
            out[real] = ""
    return out


def compute_key(name: str, op_dir: Path, opts: dict, source_list: Sequence[Path] | None = None,
                ) -> tuple[str, dict, list[Path], list[Path]]:
    """(key, config, sources to compile, every input file) of the op as it is now:
    the sources in ``op_dir``, or ``source_list`` when given."""
    cfg, compiled, inputs, hashed = _inputs(name, op_dir, opts, source_list)
    return digest(cfg, op_dir, hashed), cfg, compiled, inputs


def key_record(name: str, op_dir: Path, opts: dict, source_list: Sequence[Path] | None = None,
               ) -> tuple[str, dict]:
    """(key, what it names) of the op as it is now: :func:`describe`'s record, which a
    build's manifest keeps as ``inputs`` so that a miss can say what differs."""
    cfg, _compiled, _inputs_, hashed = _inputs(name, op_dir, opts, source_list)
    record = describe(cfg, op_dir, hashed)
    return digest_of(record), record


def _inputs(name, op_dir, opts, source_list):
    all_sources, cuda_only = sources.op_sources(name, op_dir, source_list)
    if not all_sources:
        raise JitLoaderError(
            f"op {name!r}: no C++/CUDA source ({', '.join(sources.SOURCE_SUFFIXES)}) in {op_dir}")
    dirs = sources.include_dirs(op_dir, opts)
    abi = abis.folder_abi(name, all_sources, dirs)
    cfg = config(name, op_dir, opts, all_sources, cuda_only, abi, folder=source_list is None)
    compiled = [p for p in all_sources if cfg["with_cuda"] or not cuda_only(p)]
    headers = sources.local_headers(all_sources, dirs)
    hashed = {p: sources.sha256(p) for p in set(compiled) | set(headers)}
    return cfg, compiled, [*all_sources, *headers], hashed


def describe(cfg: dict, op_dir: Path, hashes: dict[Path, str]) -> dict:
    """What a key names: the configuration's key view, and each file compiled or included
    by its name in the key (relative where the key is portable) with its content hash."""
    stable = cfg.get("abi") == abis.STABLE
    return {"config": key_view(cfg, op_dir),
            "files": [[_portable_file(p, op_dir, stable), hashes[p]] for p in sorted(hashes)]}


def digest(cfg: dict, op_dir: Path, hashes: dict[Path, str]) -> str:
    """The key of a configuration and the content hash of each file compiled or included
    (what ``compute_key`` hashes; also used to check that texts read later are still
    those of a key)."""
    return digest_of(describe(cfg, op_dir, hashes))


def digest_of(record: dict) -> str:
    """The key of a :func:`describe` record."""
    out = hashlib.sha256(json.dumps(record["config"], sort_keys=True).encode())
    for name, file_hash in record["files"]:
        out.update(f"\0{name}\0{file_hash}".encode())
    return out.hexdigest()[:20]
