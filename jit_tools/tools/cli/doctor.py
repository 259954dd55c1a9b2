"""``python -m jit_loader doctor``: one verdict per line (OK, WARN, ERROR) on torch, nvcc,
the C++ compiler and its ABI, Ninja, the GPUs, the cache and the settings, each with its fix.
What the loader would use comes from ``toolchain`` and ``CacheStore``; doctor judges it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from jit_tools import _torch_private, layers, locks, pipeline, store as stores, usage
from jit_tools.builder import shared, toolchain
from jit_tools.errors import JitLoaderError
from jit_tools.store import CacheStore
from jit_tools.tools.cli import text

NAME = "doctor"
HELP = "check torch, nvcc, compiler, ninja, GPUs and the cache; exit 1 on any ERROR"
DESCRIPTION = """\
Check that this machine can build and load ops: torch and its CUDA version, nvcc against it,
the C++ compiler and its ABI, ninja, the visible GPUs and the arch list builds use, the
cache folder and its free space, and broken cache entries. One verdict per line (OK, WARN,
ERROR) with the fix; the exit status is 1 when any line is an ERROR."""


LOW_DISK_BYTES = 2 * 1024**3     # below this much free space, doctor warns
MIN_GCC = (9, 0)                 # torch's headers are C++17: gcc 9 or newer
# Headers of CUDA libraries that ATen/cuda/CUDAContext.h includes (every op using the
# current stream does); minimal toolkits (nvcc and cudart only) lack them.
ATEN_CUDA_HEADERS = ("cuda_runtime_api.h", "cublas_v2.h", "cublasLt.h", "cusparse.h", "cusolverDn.h")


def _run(cmd: list[str]) -> tuple[int, str]:
    """Exit status and combined output of a quick tool query (``--version`` and alike)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, LC_ALL="C"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return proc.returncode, proc.stdout + proc.stderr


def _version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _check_torch(torch) -> list[tuple[str, str]]:
    py = sys.version.split()[0]
    if torch.version.cuda:
        return [("OK", f"torch {torch.__version__}, a CUDA {torch.version.cuda} build (Python {py})")]
    return [("WARN", f"torch {torch.__version__} is a CPU-only build (Python {py}): .cu sources are "
                     "skipped and ops run on CPU only; install a CUDA build of torch to use GPUs")]


def _check_nvcc(torch) -> tuple[list[tuple[str, str]], tuple[int, ...] | None]:
    """Verdicts on the CUDA toolkit, and nvcc's CUDA version (None when not usable)."""
    want = torch.version.cuda
    fix_to = f"a CUDA {want} toolkit" if want else "a CUDA toolkit"
    for var in ("CUDA_HOME", "CUDA_PATH"):  # the order toolchain.cuda_home() uses
        home = os.environ.get(var)
        if home:
            if not os.path.isfile(os.path.join(home, "bin", "nvcc")):
                return [("ERROR", f"{var}={home} has no bin/nvcc: point {var} at {fix_to} "
                                  f"(the folder that contains bin/nvcc) or unset {var}")], None
            how = var
            break
    home = toolchain.cuda_home()
    if not any(os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")):
        on_path = shutil.which("nvcc")
        on_path_home = on_path and os.path.dirname(os.path.dirname(os.path.realpath(on_path)))
        how = "nvcc on PATH" if home and on_path_home == home else "the default location"
    if home is None:
        if not want:
            return [("OK", "nvcc: not found, and not needed with a CPU-only torch")], None
        return [("WARN", f"nvcc not found (no CUDA_HOME, none on PATH or in /usr/local/cuda): ops with "
                         f".cu sources build for CPU only; install {fix_to} or set CUDA_HOME")], None
    nvcc = os.path.join(home, "bin", "nvcc")
    status, out = _run([nvcc, "--version"])
    m = re.search(r"release (\d+)\.(\d+)", out)
    if status != 0 or not m:
        first = out.strip().splitlines()[-1] if out.strip() else f"exit status {status}"
        return [("ERROR", f"{nvcc} (via {how}) does not run: {first}")], None
    have = (int(m.group(1)), int(m.group(2)))
    found = f"nvcc {nvcc} (via {how}): CUDA {have[0]}.{have[1]}"
    if not want:
        return [("OK", f"{found}; unused, torch is a CPU-only build")], have
    torch_v = tuple(int(p) for p in want.split(".")[:2])
    if have[0] != torch_v[0]:
        return [("ERROR", f"{found}, but torch was built with CUDA {want}: CUDA builds would fail. Fix: set "
                          f"CUDA_HOME to a CUDA {torch_v[0]}.x toolkit (e.g. /usr/local/cuda-{want}), or "
                          f"install a torch built for CUDA {have[0]}.x "
                          "(https://pytorch.org/get-started/locally/)")], have
    if have != torch_v:
        verdicts = [("WARN", f"{found}, torch was built with CUDA {want}: same major version, "
                             "usually works; a matching toolkit is the safe choice")]
    else:
        verdicts = [("OK", f"{found}, matches torch")]
    return verdicts + _check_cuda_headers(home, nvcc, how), have


def _check_cuda_headers(home: str, nvcc: str, how: str) -> list[tuple[str, str]]:
    """The toolkit folder the loader uses must hold the headers torch's ATen/cuda includes."""
    include = Path(home) / "include"
    if not (include / "cuda_runtime_api.h").is_file():
        # e.g. /usr/local/bin/nvcc is a wrapper script: its toolkit is elsewhere. nvcc knows.
        _status, out = _run([nvcc, "--dryrun", "-x", "cu", "-E", os.devnull])
        m = re.search(r"TOP=(\S+)", out)
        top = os.path.realpath(m.group(1)) if m else None
        if top and os.path.isfile(os.path.join(top, "include", "cuda_runtime_api.h")):
            fix = f"set CUDA_HOME={top} (the toolkit this nvcc belongs to)"
        else:
            fix = "set CUDA_HOME to the toolkit folder that has bin/nvcc and include/cuda_runtime_api.h"
        return [("ERROR", f"the CUDA toolkit folder derived from {how} is {home}, "
                          f"which has no include/cuda_runtime_api.h: CUDA builds fail. Fix: {fix}")]
    # The loader adds the header folders of pip's NVIDIA packages when the toolkit
    # lacks the library headers (a compiler-only toolkit), as torch's wheels do.
    extra = [Path(p) for p in toolchain.pip_cuda_includes(home)]
    missing = [h for h in ATEN_CUDA_HEADERS
               if not any((folder / h).is_file() for folder in (include, *extra))]
    if missing:
        return [("ERROR", f"the CUDA toolkit {home} lacks {', '.join(missing)}, which torch's ATen/cuda "
                          "headers include, and no pip NVIDIA package provides them: CUDA ops that use "
                          "ATen/cuda/CUDAContext.h will not compile. Fix: install the toolkit's "
                          "cuBLAS/cuSPARSE/cuSOLVER development headers")]
    providers = sorted({str(folder) for h in ATEN_CUDA_HEADERS if not (include / h).is_file()
                        for folder in extra if (folder / h).is_file()})
    if providers:
        return [("OK", f"CUDA library headers (cuBLAS, cuSPARSE...): not in {include}; builds take them "
                       f"from pip's NVIDIA packages ({', '.join(providers)})")]
    return []


def _check_compiler(torch, nvcc_version) -> list[tuple[str, str]]:
    cxx = toolchain.cxx_compiler()
    path = shutil.which(cxx)
    if path is None:
        return [("ERROR", f"C++ compiler {cxx!r} not found on PATH: install g++ (e.g. apt install g++) "
                          "or set CXX to your compiler")]
    _status, out = _run([cxx, "--version"])
    first = out.strip().splitlines()[0] if out.strip() else "?"
    is_clang = "clang" in out.lower()
    _status, dumped = _run([cxx, "-dumpfullversion", "-dumpversion"])
    version = _version(dumped) or _version(first)
    verdicts = []
    if version is None:
        verdicts.append(("WARN", f"C++ compiler {path}: cannot tell its version ({first})"))
    elif not is_clang and version < MIN_GCC:
        verdicts.append(("ERROR", f"C++ compiler {path} is gcc {'.'.join(map(str, version))}; torch's "
                                  "headers need C++17, gcc 9 or newer: install a newer g++ and set CXX"))
    else:
        verdicts.append(("OK", f"C++ compiler {path}: {first}"))

    # nvcc refuses host compilers outside its supported range (torch keeps the table).
    if torch.version.cuda and nvcc_version and version and not os.environ.get("CC"):
        cpp_extension = toolchain.cpp_extension()
        table = cpp_extension.CUDA_CLANG_VERSIONS if is_clang else cpp_extension.CUDA_GCC_VERSIONS
        bounds = table.get(f"{nvcc_version[0]}.{nvcc_version[1]}")
        if bounds and not (bounds[0] <= version < bounds[1]):
            low, high = (".".join(map(str, b)) for b in bounds)
            verdicts.append(("ERROR", f"nvcc {nvcc_version[0]}.{nvcc_version[1]} accepts host compilers "
                                      f">= {low} and < {high}, not {'.'.join(map(str, version))}: install a "
                                      "supported g++ and set CC (nvcc uses it through -ccbin)"))

    # ABI: torch's build flags do not force _GLIBCXX_USE_CXX11_ABI, so the compiler's
    # default must match torch's. Preprocessing <string> shows the default (no compile).
    want = int(_torch_private.cxx11_abi())
    try:
        proc = subprocess.run([cxx, "-x", "c++", "-E", "-dM", "-"], input="#include <string>\n",
                              capture_output=True, text=True, timeout=60)
        macros = proc.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        macros = ""
        first = str(e)
    m = re.search(r"#define _GLIBCXX_USE_CXX11_ABI (\d)", macros)
    if m and int(m.group(1)) == want:
        verdicts.append(("OK", f"C++ ABI: {cxx} defaults to _GLIBCXX_USE_CXX11_ABI={want}, as torch was "
                               "built (checked by preprocessing <string>)"))
    elif m:
        verdicts.append(("ERROR", f"C++ ABI: {cxx} defaults to _GLIBCXX_USE_CXX11_ABI={m.group(1)} but torch "
                                  f"uses {want}: ops would fail to load with undefined symbols. Use a g++ "
                                  f"with the default ABI (RHEL devtoolset compilers force 0) or pass "
                                  f"extra_cflags=['-D_GLIBCXX_USE_CXX11_ABI={want}']"))
    elif "_LIBCPP_VERSION" in macros:
        verdicts.append(("ERROR", f"C++ ABI: {cxx} uses libc++, but torch is built against libstdc++: "
                                  "use g++ (set CXX=g++)"))
    else:
        verdicts.append(("WARN", f"C++ ABI: could not preprocess <string> with {cxx}, ABI not checked"))

    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        version_tag = f"{sys.version_info.major}.{sys.version_info.minor}"
        verdicts.append(("WARN", f"Python headers missing ({include}/Python.h): ops that use pybind11 "
                                 f"(torch/extension.h) will not compile; install python{version_tag}-dev"))
    return verdicts


def _check_ninja() -> list[tuple[str, str]]:
    ninja = shutil.which("ninja")
    if ninja is None:
        beside = Path(sys.executable).parent / "ninja"
        hint = (f"; it is installed in {beside.parent}, which is not on PATH: activate that "
                "environment or add it to PATH") if beside.is_file() else ""
        return [("ERROR", f"ninja not found on PATH (builds run it): pip install ninja{hint}")]
    _status, out = _run([ninja, "--version"])
    return [("OK", f"ninja {out.strip()} ({ninja})")]


def _arch_covers(arch_list: str, capability: tuple[int, int]) -> bool | None:
    """Whether code built for ``arch_list`` runs on a GPU of ``capability``; None when
    the list has entries we cannot read (named architectures)."""
    covered = False
    for item in re.split(r"[;,\s]+", arch_list.strip()):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", item)
        if not m:
            return None
        arch = (int(m.group(1)), int(m.group(2)))
        if m.group(4) and arch <= capability:        # PTX is JIT-compiled for newer GPUs
            covered = True
        elif m.group(3) and arch == capability:      # sm_90a: exactly that GPU
            covered = True
        elif not m.group(3) and arch[0] == capability[0] and arch[1] <= capability[1]:
            covered = True                           # SASS runs on the same major, newer minor
    return covered


def _arch_source() -> str:
    var = toolchain.cuda_arch_variable()
    return f"from {var}" if var else "from the visible GPUs"


def _check_gpus(torch) -> list[tuple[str, str]]:
    if not torch.version.cuda:
        return []
    try:
        count = torch.cuda.device_count()
    except Exception as e:  # a broken driver
        return [("WARN", f"cannot query GPUs ({e}); builds use CUDA arch list {toolchain.cuda_arch_list()}")]
    arch = toolchain.cuda_arch_list()
    if count == 0:
        source = _arch_source() if _arch_source() != "from the visible GPUs" else "the default"
        why_not = toolchain.why_no_cuda()
        if why_not is not None:  # the nvcc check above gave the verdict and the fix
            return [("WARN", f"no GPU visible: CUDA kernels cannot run here, and .cu sources are "
                             f"not compiled either ({why_not})")]
        return [("WARN", f"no GPU visible: CUDA kernels cannot run here; .cu sources are still compiled, "
                         f"for CUDA arch list {arch} ({source}; set JIT_LOADER_CUDA_ARCH to choose)")]
    verdicts = []
    for i in range(count):
        cap = torch.cuda.get_device_capability(i)
        gpu = f"GPU {i}: {torch.cuda.get_device_name(i)}, compute capability {cap[0]}.{cap[1]}"
        if _arch_covers(arch, cap) is False:
            verdicts.append(("WARN", f"{gpu}: not covered by the arch list {arch} ({_arch_source()}); "
                                     f"add {cap[0]}.{cap[1]} to JIT_LOADER_CUDA_ARCH"))
        else:
            verdicts.append(("OK", f"{gpu}; builds use CUDA arch list {arch} ({_arch_source()})"))
    return verdicts


def _check_cache() -> list[tuple[str, str]]:
    store = stores.current()
    root = store.root
    fix = "set JIT_LOADER_CACHE to a writable folder"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
            pass
    except OSError as e:
        blocker = next((p for p in (root, *root.parents) if p.exists()), root)
        detail = f"{blocker} is a file" if blocker.is_file() else e.strerror
        return [("ERROR", f"cache {root} is not writable ({detail}): {fix}")]
    free = shutil.disk_usage(root).free
    ops = store.op_names()
    builds = sum(len(pipeline.cached_builds(n)) for n in ops)
    used = sum(stores.folder_bytes(store.op_folder(n)) for n in ops)
    where = "from JIT_LOADER_CACHE" if os.environ.get("JIT_LOADER_CACHE") else "default location"
    pieces = shared.pieces(root)
    ccache_bytes = stores.folder_bytes(store.ccache_folder())
    kinds = ", ".join(f"{k} {text.size(sum(p['bytes'] for p in pieces if p['kind'] == k))}"
                      for k in sorted({p["kind"] for p in pieces}))
    summary = (f"cache {root} ({where}): writable, {text.size(free)} free; "
               f"{builds} build(s) of {len(ops)} op(s) use {text.size(used)}; "
               f"{len(pieces)} shared piece(s) in {store.shared_folder()} use "
               f"{text.size(sum(p['bytes'] for p in pieces))}" + (f" ({kinds})" if kinds else "")
               + f"; ccache's store {text.size(ccache_bytes)}")
    if free < LOW_DISK_BYTES:
        return [("WARN", f"{summary}. Low on space: a CUDA build needs a few hundred MB; free space, "
                         "run python -m jit_loader clean, or set JIT_LOADER_CACHE elsewhere")]
    return [("OK", summary)]


def _check_cache_entries() -> list[tuple[str, str]]:
    store = stores.current()
    if not store.root.is_dir():
        return []
    problems = []
    for name in store.op_names():
        for b in pipeline.cached_builds(name, verify="full"):
            if not b["valid"]:
                problems.append(f"{name}/{b['key']}: {CacheStore.problem(b)}")
        leftovers = store.leftovers(name)
        if leftovers:
            with store.build_lock_if_free(name) as builder:
                if builder is None:  # else a build is running and writing them now
                    problems += [f"{p.relative_to(store.root)}: left by an interrupted build"
                                 for p in leftovers]
    if not problems:
        return [("OK", "cache entries: every build has its manifest and a complete library "
                       "whose sha256 matches the one recorded when it was built")]
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return [("WARN", f"{len(problems)} broken cache entr{'y' if len(problems) == 1 else 'ies'} ({shown}); "
                     "a load rebuilds them, and python -m jit_loader clean --broken removes them now")]


def _check_settings() -> list[tuple[str, str]]:
    verdicts, notes = [], []
    for var, default, meaning in (("JIT_LOADER_KEEP", str(usage.DEFAULT_KEEP), "builds kept per op"),
                                  ("MAX_JOBS", str(toolchain.cores()), "parallel compile jobs")):
        value = os.environ.get(var) or default
        if not value.isdigit() or int(value) < 1:
            verdicts.append(("ERROR", f"{var}={value!r} is not a positive whole number: set it to e.g. "
                                      f"{default} or unset it"))
        else:
            notes.append(f"{value} {meaning} ({var})")
    try:
        if layers.never_compile():
            notes.append(f"no compiling ({layers.ENV}=never: a load that would compile raises)")
        if not locks.enabled():
            verdicts.append(("WARN", f"{locks.ENV}=off: no file locks, so processes that load one op at "
                                     "once may all compile it (the cache stays correct); meant for tests "
                                     "and filesystems whose locks hang"))
    except JitLoaderError as e:
        verdicts.append(("ERROR", str(e)))
    if not any(v == "ERROR" for v, _ in verdicts):
        verdicts.append(("OK", "settings: " + ", ".join(notes)))
    return verdicts


def run(args) -> int:
    import torch

    nvcc_verdicts, nvcc_version = _check_nvcc(torch)
    verdicts = [
        *_check_torch(torch),
        *nvcc_verdicts,
        *_check_compiler(torch, nvcc_version),
        *_check_ninja(),
        *_check_gpus(torch),
        *_check_cache(),
        *_check_cache_entries(),
        *_check_settings(),
    ]
    for verdict, message in verdicts:
        print(f"{verdict:<5} {message}", flush=True)
    return 1 if any(v == "ERROR" for v, _ in verdicts) else 0
