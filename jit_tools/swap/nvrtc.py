"""Device code of an op's ``.cu`` compiled with NVRTC, one kernel instantiation at a time.

nvcc compiles every instantiation a ``.cu`` names, for every arch of the list; a call
runs one of them. NVRTC compiles the instantiations asked for (name expressions such as
``lltm::forward_kernel<float>``) for one arch, in the process, without a host compile. It
sees the same source as nvcc: the launchers of a ``.cu`` sit under
``#if !defined(__CUDACC_RTC__)`` (they are host code, which NVRTC does not compile), and
the standard headers the device code includes come from the toolkit's libcu++ through
the small headers of ``nvrtc_include/``.

Options are the Ninja build's nvcc flags translated (:func:`translate_nvcc_flags`): the
defines, include folders, ``-std``, ``-lineinfo``, fast-math and register choices. Results
are cached on disk by content (the ``.cu``, every local header it includes, options,
arch, name expressions, NVRTC version, toolkit headers), so a second compile of the same
inputs runs nothing. An NVRTC error raises :class:`BuildError` whose first line is
``file:line: message`` in the user's file.

Most of a compile is the headers: libcu++'s ``<cuda/std/type_traits>`` alone is about half
a second of NVRTC's front end, where the kernels take a tenth. So compiles use NVRTC's
automatic precompiled header (``--pch``, NVRTC 12.4 and later) for the ``.cu``'s leading
``#include`` block. Such a header belongs to the NVRTC instance of one process (NVRTC
refuses one made by another), and NVRTC reuses it without looking at whether the headers
changed, so each lives in a per-process folder named by the content of everything it could
hold (:func:`_pch_folder`): an edited header gets a new one. :func:`warm_for_op` makes it
ahead of the first kernel edit. ``JIT_LOADER_NVRTC_PCH=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from jit_tools import sources
from jit_tools.builder import toolchain
from jit_tools.errors import BuildError, JitLoaderError
from jit_tools.log import logger
from jit_tools.swap.nvrtc_options import (TORCH_NVCC_FLAGS, arch_option, first_arch, torch_cxx_std,
                                        translate_nvcc_flags)

NVRTC_INCLUDE = Path(__file__).resolve().parents[1] / "nvrtc_include"
FORMAT = 1  # bump when what a cache entry holds changes meaning

# ---- the NVRTC library -----------------------------------------------------------------

_LIB: list = []


def _candidates() -> list[str]:
    """libnvrtc files: torch's nvidia wheels first (the NVRTC torch itself uses), then the
    toolkit's."""
    found = []
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libnvrtc.so.*")))
    home = toolchain.cuda_home()
    if home:
        for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            found += sorted(glob.glob(os.path.join(home, sub, "libnvrtc.so*")))
    return [p for p in found if re.search(r"libnvrtc\.so(\.\d+)*$", p)]


def library() -> ctypes.CDLL:
    """libnvrtc, loaded once; its builtins library (same folder) is loaded first, since
    libnvrtc looks for it by soname only."""
    if _LIB:
        return _LIB[0]
    errors = []
    for path in _candidates():
        try:
            for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path),
                                                          "libnvrtc-builtins.so.*"))):
                if ".alt." not in builtins:
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        _LIB.append(lib)
        return lib
    raise JitLoaderError(
        "NVRTC was not found (looked in torch's nvidia wheels and the CUDA toolkit"
        + (": " + "; ".join(errors) if errors else "") + ")")


def version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def why_unavailable() -> str | None:
    """None when NVRTC and the toolkit's libcu++ headers are there; else the reason."""
    try:
        library()
    except JitLoaderError as e:
        return str(e)
    if cccl_include() is None:
        return "the CUDA toolkit's libcu++ headers (include/cccl) were not found"
    return None


def cccl_include() -> str | None:
    home = toolchain.cuda_home()
    for inc in ([os.path.join(home, "include", "cccl"), os.path.join(home, "include")]
                if home else []):
        if os.path.isfile(os.path.join(inc, "cuda", "std", "cstdint")):
            return inc
    return None


def toolkit_includes() -> list[str]:
    """Include folders of every NVRTC compile: the standard-header shims, libcu++, the
    toolkit's headers."""
    home = toolchain.cuda_home()
    dirs = [str(NVRTC_INCLUDE)]
    cccl = cccl_include()
    if cccl:
        dirs.append(cccl)
    if home:
        dirs.append(os.path.join(home, "include"))
    return dirs


# ---- compiling -------------------------------------------------------------------------

@dataclass
class Kernels:
    """What one NVRTC compile produced: a cubin (``sm_XX``) or PTX (``compute_XX``), and
    the mangled name of each name expression."""
    image: bytes
    kind: str  # "cubin" or "ptx"
    lowered: dict[str, str]
    path: Path | None = None
    cached: bool = False
    log: str = field(default="", repr=False)


def _check(lib, status: int, what: str) -> None:
    if status != 0:
        raise JitLoaderError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(status).decode()}")


def run_nvrtc(source: Path, text: bytes, names: Sequence[str], options: Sequence[str],
               want_cubin: bool) -> tuple[int, str, bytes, dict[str, str]]:
    """One NVRTC program: (status of the compile, log, image, lowered names)."""
    lib = library()
    prog = ctypes.c_void_p()
    # The program's name is the file's path, so NVRTC's messages and the line table name
    # the user's file; quoted includes resolve through -I<op folder>.
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), text, str(source).encode(), 0,
                                       None, None), "nvrtcCreateProgram")
    try:
        for name in names:
            _check(lib, lib.nvrtcAddNameExpression(prog, name.encode()), "nvrtcAddNameExpression")
        encoded = [o.encode() for o in options]
        status = lib.nvrtcCompileProgram(prog, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log_buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.value.decode(errors="replace")
        if status != 0:
            return status, log, b"", {}
        lowered = {}
        for name in names:
            ptr = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(ptr)),
                   f"nvrtcGetLoweredName({name})")
            lowered[name] = ptr.value.decode()
        get_size, get = ((lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if want_cubin
                         else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX))
        _check(lib, get_size(prog, ctypes.byref(size)), "getting the image size")
        image = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, image), "getting the image")
        return 0, log, image.raw, lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


_NVRTC_ERROR = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$")


def _error(source: Path, log: str, log_path: Path, local_dirs: Sequence[Path]) -> BuildError:
    """The first error of an NVRTC log, preferring one in the user's own files."""
    found = [(m.group("file"), int(m.group("line")), m.group("msg").strip())
             for m in map(_NVRTC_ERROR.match, log.splitlines()) if m]
    local = [f for f in found
             if any(str(Path(f[0])).startswith(str(d) + os.sep) for d in local_dirs)]
    if found:
        file, line, msg = (local or found)[0]
        first = f"{file}:{line}: {msg}"
    else:
        file = line = None
        first = next((l.strip() for l in log.splitlines() if l.strip()),
                     "NVRTC failed without a message")
    tail = "\n".join(log.splitlines()[-30:])
    return BuildError(f"{first}\nNVRTC compile of {source} failed; full log: {log_path}\n{tail}",
                      log_path=str(log_path), file=file, line=line, log=log)


def _identity(path: str) -> str:
    try:
        st = os.stat(path)
        return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return path


def cache_key(source: Path, names: Sequence[str], options: Sequence[str], arch: str,
              include_dirs: Sequence[Path]) -> str:
    """Content hash of everything a compile reads: the .cu and every local header it
    includes, the options, arch and name expressions, NVRTC's version and library, and the
    identity of the toolkit headers' folders (a toolkit update changes them)."""
    digest = hashlib.sha256(json.dumps({
        "format": FORMAT, "names": sorted(names), "options": list(options), "arch": arch,
        "nvrtc": version(), "library": _identity(library()._name),
        "toolkit": [_identity(d) for d in toolkit_includes()],
        "shims": [sources.sha256(p) for p in sorted(NVRTC_INCLUDE.iterdir())],
    }, sort_keys=True).encode())
    for p in [source.resolve(), *sources.local_headers([source], list(include_dirs))]:
        digest.update(f"\0{p}\0{sources.sha256(p)}".encode())
    return digest.hexdigest()[:24]


def compile_options(arch: str, include_dirs: Sequence[Path], nvcc_flags: Sequence[str]) -> list[str]:
    """NVRTC's options for one arch, the build's include folders and its extra nvcc flags;
    the target option first."""
    translated, unknown = translate_nvcc_flags([*TORCH_NVCC_FLAGS, torch_cxx_std(), *nvcc_flags])
    if unknown:
        raise JitLoaderError(f"nvcc flags without an NVRTC equivalent: {' '.join(unknown)}")
    # Include folders in nvcc's order (the op's first), the standard-header shims before all.
    includes = [o for o in translated if o.startswith("-I")]
    shims, *toolkit = toolkit_includes()
    return [arch_option(arch), *(o for o in translated if not o.startswith("-I")), f"-I{shims}",
            *(f"-I{d}" for d in include_dirs), *includes, *(f"-I{d}" for d in toolkit)]


def compile_kernels(source: Path, names: Sequence[str], *, arch: str, cache_dir: Path,
                    include_dirs: Sequence[Path], nvcc_flags: Sequence[str] = ()) -> Kernels:
    """The instantiations ``names`` of ``source``'s kernels, for one ``arch`` (an arch
    list entry: ``9.0``, ``9.0+PTX``), compiled with NVRTC or found in ``cache_dir``.

    ``include_dirs`` are the build's (the op folder, ``ops/``, extra ones);
    ``nvcc_flags`` are the build's extra nvcc flags, translated. A flag NVRTC cannot
    take raises JitLoaderError naming it (the caller keeps to nvcc then)."""
    source = Path(source).resolve()
    options = compile_options(arch, include_dirs, nvcc_flags)
    key = cache_key(source, names, options, arch, include_dirs)
    kind = "ptx" if "=compute_" in options[0] else "cubin"
    image_path = cache_dir / f"{key}.{kind}"
    meta_path = cache_dir / f"{key}.json"
    try:
        meta = json.loads(meta_path.read_text())
        return Kernels(image_path.read_bytes(), kind, meta["lowered"], image_path, cached=True)
    except (OSError, ValueError, KeyError):
        pass
    text = source.read_bytes()
    status, log, image, lowered = _run_with_pch(source, text, names, options, include_dirs,
                                                kind == "cubin")
    cache_dir.mkdir(parents=True, exist_ok=True)
    if status != 0:
        log_path = cache_dir / f"{key}.log"
        log_path.write_text(f"nvrtc {' '.join(options)} {source}\n{log}")
        raise _error(source, log, log_path, include_dirs)
    # Image first, then the record that makes it an entry, each by an atomic rename.
    for path, data in ((image_path, image),
                       (meta_path, json.dumps({"source": str(source), "arch": arch,
                                               "options": options, "lowered": lowered}).encode())):
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return Kernels(image, kind, lowered, image_path, cached=False, log=log)


# ---- the precompiled header of a process ----------------------------------------------------

_PCH_ROOT: list[Path] = []
_PCH_LOCKS: dict[Path, threading.Lock] = {}
_PCH_GUARD = threading.Lock()


def pch_enabled() -> bool:
    """NVRTC's automatic precompiled headers are on (NVRTC 12.4+, JIT_LOADER_NVRTC_PCH
    not 0)."""
    if os.environ.get("JIT_LOADER_NVRTC_PCH", "1") in ("0", "false", "False", ""):
        return False
    try:
        major, minor = (int(v) for v in version().split("."))
    except (JitLoaderError, ValueError):
        return False
    return (major, minor) >= (12, 4)


def _include_block(text: bytes) -> bytes:
    """The leading lines of a source that are blank, comments or preprocessor directives:
    what an automatic precompiled header can hold of the file itself."""
    block = []
    in_comment = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if in_comment:
            in_comment = b"*/" not in stripped
        elif stripped.startswith(b"/*"):
            in_comment = b"*/" not in stripped
        elif stripped and not stripped.startswith((b"#", b"//")):
            break
        block.append(line)
    return b"".join(block)


def _pch_folder(source: Path, text: bytes, options: Sequence[str],
                include_dirs: Sequence[Path]) -> Path:
    """This process's precompiled-header folder for ``source`` compiled with ``options``:
    named by the options, the source's leading include block and the content of every
    local header the source includes (NVRTC would reuse a header made before an edit)."""
    digest = hashlib.sha256(json.dumps([FORMAT, list(options)]).encode())
    digest.update(_include_block(text))
    for p in sources.local_headers([source], list(include_dirs)):
        digest.update(f"\0{p}\0{sources.sha256(p)}".encode())
    with _PCH_GUARD:
        if not _PCH_ROOT:
            root = Path(tempfile.mkdtemp(prefix="jit_loader_nvrtc_pch_"))
            import atexit

            atexit.register(shutil.rmtree, root, True)
            _PCH_ROOT.append(root)
        folder = _PCH_ROOT[0] / digest.hexdigest()[:20]
        _PCH_LOCKS.setdefault(folder, threading.Lock())
    folder.mkdir(exist_ok=True)
    return folder


def _run_with_pch(source: Path, text: bytes, names: Sequence[str], options: Sequence[str],
                  include_dirs: Sequence[Path], want_cubin: bool):
    """:func:`run_nvrtc`, through this process's precompiled header of the source's
    include block when NVRTC can make one (one compile at a time per header)."""
    if not pch_enabled():
        return run_nvrtc(source, text, names, options, want_cubin)
    try:
        folder = _pch_folder(source, text, options, include_dirs)
    except OSError as e:  # no temporary folder: compile without the header
        logger.debug("no NVRTC precompiled header for %s: %s", source, e)
        return run_nvrtc(source, text, names, options, want_cubin)
    with _PCH_LOCKS[folder]:
        status, log, image, lowered = run_nvrtc(
            source, text, names, [*options, "--pch", f"--pch-dir={folder}"], want_cubin)
    # NVRTC's notes on the header ("creating/using precompiled header file ...") are
    # not the user's business.
    log = "\n".join(line for line in log.splitlines()
                     if "precompiled header file" not in line or "error" in line)
    return status, log, image, lowered


def warm_for_op(name: str, op_dir: Path, *, opts: dict | None = None,
                arch: str | None = None) -> bool:
    """Make this process's precompiled header of the op's ``.cu`` now (a compile with no
    kernels), so that the first kernel edit compiles in a tenth of the time; False when
    there is nothing to make (no single ``.cu``, NVRTC or its headers missing)."""
    from jit_tools import key as keys

    cus = sorted(Path(op_dir).glob("*.cu"))
    if len(cus) != 1 or not pch_enabled() or why_unavailable():
        return False
    opts = opts or {}
    cfg = keys.config(name, Path(op_dir), opts, cus)
    if not cfg["with_cuda"]:
        return False
    flags = [token for flag in cfg["cuda_cflags"] for token in shlex.split(flag)]
    include_dirs = sources.include_dirs(Path(op_dir), opts)
    options = compile_options(arch or first_arch(cfg["cuda_arch"]), include_dirs, flags)
    source = cus[0].resolve()
    status, _, _, _ = _run_with_pch(source, source.read_bytes(), [], options, include_dirs,
                                    False)
    return status == 0


def compile_for_op(name: str, op_dir: Path, source: Path, names: Sequence[str], *,
                   opts: dict | None = None, arch: str | None = None,
                   cache_dir: Path | None = None) -> Kernels:
    """``names`` of ``source`` (a ``.cu`` of the op) with the options of the op's Ninja
    build (``opts`` as ``load`` takes them), cached in the op's folder of the cache."""
    from jit_tools import key as keys, store

    opts = opts or {}
    cfg = keys.config(name, op_dir, opts, [Path(source)])
    if not cfg["with_cuda"]:
        raise JitLoaderError(f"op {name!r}: CUDA is not built here ({cfg['no_cuda_reason']})")
    flags = [token for flag in cfg["cuda_cflags"] for token in shlex.split(flag)]
    return compile_kernels(
        Path(source), names, arch=arch or first_arch(cfg["cuda_arch"]),
        cache_dir=cache_dir or store.current().nvrtc_folder(name),
        include_dirs=sources.include_dirs(op_dir, opts), nvcc_flags=flags)


# ---- the kernels of an nvcc build, as name expressions -----------------------------------

def library_kernels(library_path: str | os.PathLike) -> list[str]:
    """Mangled names of the kernels an nvcc-built library launches, each once: nvcc gives
    every kernel a host stub named ``__device_stub_`` + the kernel's mangled name, and the
    library's symbol table keeps it (``nm``, no CUDA tool needed)."""
    tool = shutil.which("nm")
    if tool is None:
        raise JitLoaderError("nm (binutils) was not found")
    out = subprocess.run([tool, str(library_path)], capture_output=True, text=True,
                         check=True).stdout
    names = []
    for m in re.finditer(r"(\d+)(__device_stub__Z)", out):
        stub = out[m.start(2):m.start(2) + int(m.group(1))]
        names.append(stub[len("__device_stub_"):])
    return list(dict.fromkeys(names))


_DEMANGLE: list = []


def demangle(mangled: str) -> str:
    if not _DEMANGLE:
        cxx = ctypes.CDLL("libstdc++.so.6")
        cxx.__cxa_demangle.restype = ctypes.c_void_p
        _DEMANGLE.append(cxx)
    cxx = _DEMANGLE[0]
    status = ctypes.c_int()
    ptr = cxx.__cxa_demangle(mangled.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        raise JitLoaderError(f"cannot demangle {mangled!r}")
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


def name_expression(mangled: str) -> str:
    """The name expression NVRTC compiles for a kernel's mangled name:
    ``void lltm::(anonymous namespace)::forward_kernel<float>(long, ...)`` becomes
    ``lltm::forward_kernel<float>`` (an unnamed namespace's members are found from the
    enclosing one within the same file)."""
    if not mangled.startswith("_Z"):
        return mangled  # an extern "C" kernel: its name is the expression
    text = demangle(mangled)
    # Drop the parameter list: the last top-level parenthesised group.
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                text = text[:i]
                break
    text = text.replace("(anonymous namespace)::", "")
    if text.startswith("void "):
        text = text[len("void "):]
    return text
