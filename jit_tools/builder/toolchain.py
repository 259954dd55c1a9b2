"""The build toolchain: C++ compiler, CUDA toolkit, CUDA arch list, Ninja's cpp_extension.

Nothing here runs a compiler; tool identities are cheap (path, size, mtime) because they
are part of every cache key computed on each ``load``.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys

import torch

from jit_tools.errors import JitLoaderError

DEFAULT_CUDA_ARCH = "8.0;9.0+PTX"  # Ampere and Hopper, plus PTX newer GPUs can JIT

_ARCH_CACHE: dict[str, str] = {}


def verbose(flag: bool | None) -> bool:
    """The effective verbosity: the argument, else ``JIT_LOADER_VERBOSE``."""
    if flag is not None:
        return flag
    return os.environ.get("JIT_LOADER_VERBOSE", "") not in ("", "0", "false", "False")


def file_identity(path: str | None) -> str | None:
    """A cheap identity of a tool binary: its real path, size and mtime (no subprocess)."""
    if not path:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


_VERSIONS: dict[str, str] = {}


def tool_version(path: str | None) -> str | None:
    """What a compiler says it is (the first line of ``--version`` less the name it was
    called by, e.g. ``(GCC) 13.3.0``; nvcc's ``Build cuda_13.0...`` line): the same on
    every machine that has the same release, unlike ``file_identity``. One subprocess per
    tool and process."""
    ident = file_identity(path)
    if ident is None:
        return None
    if ident not in _VERSIONS:
        real = os.path.realpath(path)
        try:
            out = subprocess.run([real, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        build = [line for line in lines if line.startswith("Build ")]  # nvcc's last line
        # GCC starts with the name it was called by, which says nothing of the release.
        first = (build or lines or [ident])[0]
        _VERSIONS[ident] = first.removeprefix(os.path.basename(real)).strip() or first
    return _VERSIONS[ident]


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


def why_no_cuda() -> str | None:
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


def pip_cuda_includes(home: str | None) -> list[str]:
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


def cores() -> int:
    """The cores this process may use (taskset, Slurm and container CPU masks narrow it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def max_jobs() -> str:
    """Ninja's -j: ``MAX_JOBS`` when it is a positive integer, else the cores this
    process may use."""
    text = os.environ.get("MAX_JOBS", "").strip()
    if not text:
        return str(cores())
    if not text.isdigit() or int(text) < 1:
        raise JitLoaderError(
            f"MAX_JOBS={text!r} is not a positive whole number of parallel compile jobs; "
            "set it like MAX_JOBS=4, or unset it to use every core")
    return text


def ninja() -> str:
    """The Ninja of this Python environment (the ``ninja`` package that requirements
    install), else the first one on PATH. A system Ninja may be older: 1.11 kept an
    object compiled from a file edited during the compile."""
    try:
        import ninja as ninja_package
        candidate = os.path.join(ninja_package.BIN_DIR, "ninja")
        if os.access(candidate, os.X_OK):
            return candidate
    except ImportError:
        pass
    candidate = os.path.join(os.path.dirname(sys.executable), "ninja")
    if os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("ninja") or "ninja"


def cxx_compiler() -> str:
    return os.environ.get("CXX", "c++")


def nvcc_command() -> str:
    """The nvcc that compiles ``.cu`` units, as torch's build files name it: ``PYTORCH_NVCC``,
    else the toolkit's; less any compiler cache in front of it (see :func:`unwrap`)."""
    return unwrap(os.environ.get("PYTORCH_NVCC") or shlex.quote(os.path.join(cuda_home(), "bin", "nvcc")))


WRAPPERS = ("ccache", "sccache")


def unwrap(command: str) -> str:
    """A compiler command less the compiler cache in front of it (``CXX="ccache g++"``, or
    what ``cpp_extension`` writes when one is on PATH, torch 2.12 and later): the loader runs
    its own ccache, with its own settings, and probes and keys the compiler itself."""
    tokens = shlex.split(command)
    while len(tokens) > 1 and os.path.basename(tokens[0]) in WRAPPERS:
        tokens = tokens[1:]
    return shlex.join(tokens)


_GCC: dict[str, bool] = {}


def is_gcc(cxx: str) -> bool:
    """True when the C++ compiler is GCC (its .gch precompiled headers, ``-fuse-ld=gold``)."""
    ident = file_identity(shutil.which(cxx)) or cxx
    if ident not in _GCC:
        try:
            out = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _GCC[ident] = "Free Software Foundation" in out and "clang" not in out.lower()
    return _GCC[ident]


def cuda_arch_variable() -> str | None:
    """The variable the arch list is read from: ``JIT_LOADER_CUDA_ARCH``, else
    ``TORCH_CUDA_ARCH_LIST``; None when the first one set is ``native`` or neither is
    (then the visible GPUs decide, else the default)."""
    var = "JIT_LOADER_CUDA_ARCH" if os.environ.get("JIT_LOADER_CUDA_ARCH") else "TORCH_CUDA_ARCH_LIST"
    value = os.environ.get(var)
    return var if value and value != "native" else None


def cuda_arch_list(requested: str | None = None) -> str:
    """The CUDA arch list builds use: explicit, env, visible GPUs, else the default.

    With no GPU visible torch's own default would raise ``IndexError``; we fall back
    to DEFAULT_CUDA_ARCH so CUDA sources still compile (e.g. on a login node or in CI).
    """
    if requested:
        return requested
    var = cuda_arch_variable()
    if var is not None:
        return os.environ[var]
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


def torch_include_paths() -> list[str]:
    """torch's C++ header folders, as ``cpp_extension.include_paths()`` gives them for the
    CPU (tests/test_cluster.py compares the two), without importing ``cpp_extension``:
    that imports setuptools, more than the rest of a warm load costs, and a load computes
    the keys of the pieces it looks for (the autograd kernel, the fast entry) with these."""
    include = os.path.join(os.path.dirname(torch.__file__), "include")
    return [include, os.path.join(include, "torch", "csrc", "api", "include")]


def cpp_extension():
    """torch.utils.cpp_extension, imported quietly: it warns when CUDA_HOME is unset, and
    on every machine without a GPU ("No CUDA runtime is found"), where compiling CUDA
    sources is exactly what this toolkit means to do."""
    if "torch.utils.cpp_extension" not in sys.modules:
        torch_logger = logging.getLogger("torch.utils.cpp_extension")
        level = torch_logger.level
        torch_logger.setLevel(logging.ERROR)
        set_home = "CUDA_HOME" not in os.environ and cuda_home() is not None
        try:
            if set_home:
                os.environ["CUDA_HOME"] = cuda_home()
            from torch.utils import cpp_extension as cx
        finally:
            torch_logger.setLevel(level)
            if set_home:
                del os.environ["CUDA_HOME"]
    from torch.utils import cpp_extension as cx
    return cx
