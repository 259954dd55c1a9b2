"""The build speed-ups: a precompiled header of the lean header set (ATen/ATen.h +
torch/library.h, or the stable ABI's set) for the ops' C++ units, the probe that picks the
gold linker, ccache in front of the compilers, and nvcc's host and device halves side by
side. Each piece is built once per toolchain and flags into the store of shared pieces
(:mod:`jit_tools.builder.shared`); ccache's store is ``<cache>/_ccache/``.

None of them changes what an op computes, so none enters the op's cache key; a build
that cannot use a piece (no ccache, a compiler that refuses the header) builds without
it. Which pieces a build uses is :func:`jit_tools.builder.ninja_file.choose_pieces`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from jit_tools import abi as abis, key as keys
from jit_tools.builder import toolchain
from jit_tools.builder.shared import build_piece, piece_key, run
from jit_tools.store import CacheStore


def _off(var: str) -> bool:
    return os.environ.get(var, "1").strip().lower() in ("0", "false", "no", "off")


# ---- ccache ------------------------------------------------------------------------------

def ccache() -> str | None:
    """The ccache binary to compile through, or None (absent, or JIT_LOADER_CCACHE=0)."""
    if _off("JIT_LOADER_CCACHE"):
        return None
    beside = os.path.join(os.path.dirname(sys.executable), "ccache")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("ccache")


def _headers_identity() -> str:
    """What decides the bytes of the headers outside the op that the dependency files
    of C++ units leave out (``-MMD`` omits ``-isystem`` folders): torch and the CUDA
    toolkit. Cheap: versions and file identities, no hashing."""
    parts = [torch.__version__, str(getattr(torch.version, "git_version", "")),
             str(torch.version.cuda), toolchain.file_identity(torch.__file__) or ""]
    home = toolchain.cuda_home() if torch.version.cuda else None
    if home:
        parts += [toolchain.file_identity(os.path.join(home, "bin", "nvcc")) or "",
                  toolchain.file_identity(os.path.join(home, "include", "cuda_runtime_api.h")) or ""]
    return "\n".join(parts) + "\n"


def ccache_env(cache_root: Path) -> dict:
    """ccache's settings for a build: its store inside the loader's cache; the work
    folder not hashed; the precompiled header accepted. No base_dir: ccache would hand
    the compiler relative paths, and compiler errors must name the user's files by
    their absolute paths (the first-error line and editors' jump-to-error use them).

    Depend mode: a miss (every edit is one) compiles at once, instead of running the
    preprocessor first to look for a hit under another name (an extra pass over the
    source and its headers, with nvcc a second pass of its own). Hits then come from
    the compiler's dependency file; the headers it leaves out (torch's, the CUDA
    toolkit's) enter the hash through a file naming their versions."""
    ccache_dir = CacheStore(cache_root).ccache_folder()
    identity = _headers_identity()
    extra = ccache_dir / f"headers-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.txt"
    if not extra.exists():
        ccache_dir.mkdir(parents=True, exist_ok=True)
        tmp = extra.with_name(f".{extra.name}.{os.getpid()}")
        tmp.write_text(identity)
        os.replace(tmp, extra)
    return {
        "CCACHE_DIR": str(ccache_dir),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_SLOPPINESS": "pch_defines,time_macros,include_file_mtime,include_file_ctime",
        "CCACHE_MAXSIZE": os.environ.get("CCACHE_MAXSIZE", "5G"),
        "CCACHE_COMPILERCHECK": "mtime",
        "CCACHE_DEPEND": "1",
        "CCACHE_PCH_EXTSUM": "1",
        "CCACHE_EXTRAFILES": str(extra),
    }


# ---- precompiled headers -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HeaderSet:
    """A header set precompiled once per toolchain and flags: its file name and text."""
    header: str
    text: str


ATEN_HEADERS = HeaderSet(
    "jit_loader_lean.h", "// The lean header set the ops' C++ units use, precompiled once.\n"
                         "#pragma once\n#include <ATen/ATen.h>\n#include <torch/library.h>\n")
STABLE_HEADERS = HeaderSet("jit_loader_stable.h", abis.STABLE_PCH_TEXT)  # jit_tools/abi.py
PCH_HEADER = ATEN_HEADERS.header
REGISTRY_HEADERS = (str(keys.REGISTRY_HEADER), str(abis.STABLE_REGISTRY_HEADER))


def header_set(config: dict) -> HeaderSet:
    """The header set of a build's ABI: a stable build's units include the stable registry
    header and nothing of ATen."""
    return STABLE_HEADERS if config.get("abi") == abis.STABLE else ATEN_HEADERS


def pch_flags(cflags: list[str], name: str, private_dirs) -> list[str]:
    """The compile flags of an op's C++ units (``cflags``: shell words as torch composes
    them) less what is the op's own: its name define, the -I of its own folders (the header
    set includes neither) and the registry header's -include (the header set is
    precompiled without it). Its precompiled header is made with exactly these."""
    private = {f"-I{d}" for d in private_dirs}
    return [tok for tok in without_registry(cflags)
            if not tok.startswith("-DTORCH_EXTENSION_NAME=") and tok not in private]


def without_registry(cflags: list[str]) -> list[str]:
    """The words of ``cflags`` (shell words as torch composes them) less the registry
    header's ``-include``."""
    tokens = shlex.split(" ".join(cflags))
    out, skip = [], False
    for i, tok in enumerate(tokens):
        if skip:
            skip = False
        elif tok == "-include" and i + 1 < len(tokens) and tokens[i + 1] in REGISTRY_HEADERS:
            skip = True
        else:
            out.append(tok)
    return out


def precompiled_header(root: Path, cxx: str, flags: list[str], post: str,
                       headers: HeaderSet = ATEN_HEADERS, now: bool = True) -> Path | None:
    """A header set precompiled with exactly the units' flags: the path of the header (its
    .gch beside it), or None where disabled or refused. With ``now`` false a missing one
    raises :class:`shared.Missing`."""
    if _off("JIT_LOADER_PCH") or not toolchain.is_gcc(cxx):
        return None
    folder = CacheStore(root).shared_folder() / f"pch-{piece_key('pch' + headers.text, cxx, flags, post)}"
    header = headers.header

    def make(tmp: Path):
        (tmp / header).write_text(headers.text)
        (tmp / "flags.json").write_text(json.dumps(
            {"family": _pch_family(cxx, flags, post, headers), "flags": flags}))
        ok, log = run([cxx, *flags, "-x", "c++-header", header, "-o", header + ".gch",
                       *shlex.split(post)], tmp)
        if ok:  # the piece is whole when it is marked built
            pch_checksum(tmp / (header + ".gch"))
        return ok, log

    built = build_piece(folder, make, now)
    if built is None:
        return None
    pch_checksum(built / (header + ".gch"))
    return built / header


def _is_define(flag: str) -> bool:
    return len(flag) > 2 and flag[:2] in ("-D", "-U")


def _pch_family(cxx: str, flags: list[str], post: str, headers: HeaderSet) -> str:
    """The key of ``flags`` less their macro definitions: precompiled headers of one
    family differ only in ``-D``/``-U`` flags."""
    return piece_key("pch" + headers.text, cxx, [f for f in flags if not _is_define(f)], post)


def sibling_header(root: Path, cxx: str, flags: list[str], post: str,
                   headers: HeaderSet = ATEN_HEADERS) -> Path | None:
    """A header set precompiled with ``flags`` less some of their ``-D``/``-U`` flags (a
    flag set that adds macros to one built before, e.g. ``-DVARIANT_A``): GCC itself
    checks, on each use, that no macro the header set reads is defined differently, and
    reads the header's text instead where one is (``-Winvalid-pch`` says so; see
    :func:`sibling_refused`). The most recently used such header, or None."""
    if _off("JIT_LOADER_PCH") or not toolchain.is_gcc(cxx) or not any(map(_is_define, flags)):
        return None
    family = _pch_family(cxx, flags, post, headers)
    ours = [f for f in flags if _is_define(f)]
    best: tuple[float, Path] | None = None
    for flags_file in CacheStore(root).shared_folder().glob("pch-*/flags.json"):
        folder = flags_file.parent
        try:
            spec = json.loads(flags_file.read_text())
            stamp = (folder / "ok").stat().st_mtime
        except (OSError, ValueError):
            continue
        theirs = [f for f in spec.get("flags", []) if _is_define(f)]
        if spec.get("family") != family or spec.get("flags") == flags:
            continue
        # Theirs must all be ours (a macro the header was built with and this unit lacks
        # is not one GCC's check covers).
        if any(f not in ours for f in theirs):
            continue
        if best is None or stamp > best[0]:
            best = (stamp, folder)
    if best is None:
        return None
    folder = best[1]
    with contextlib.suppress(OSError):
        os.utime(folder / "ok")
    pch_checksum(folder / (headers.header + ".gch"))
    return folder / headers.header


def sibling_refused(log: str) -> bool:
    """Whether GCC's ``-Winvalid-pch`` note in a build's output says it read a
    precompiled header's text instead of the header (a macro conflict)."""
    return ".gch: not used because" in log


def pch_checksum(gch: Path) -> None:
    """Write ``<header>.gch.sum``, which ccache hashes instead of the header (with
    ``CCACHE_PCH_EXTSUM``): hashing and scanning the 400 MB header for time macros
    costs more CPU than a cache hit otherwise takes, on every compile. A piece never
    changes in place (a new one is renamed in), so its name, size and time identify it."""
    checksum = gch.with_name(gch.name + ".sum")
    if checksum.exists():
        return
    st = gch.stat()
    tmp = checksum.with_name(f".{checksum.name}.{os.getpid()}")
    tmp.write_text(f"{gch.parent.name} {st.st_size} {st.st_mtime_ns}\n")
    os.replace(tmp, checksum)


def other_abi(flags: list[str]) -> tuple[list[str], HeaderSet] | None:
    """The flags and header set of the other ABI, for the same op folders, compiler and
    options as ``flags`` (a stable op's flags less the target version, or an ATen op's with
    it, where the loader's own flags begin): built after a flag set's own pieces, so that
    an op of the other ABI finds it, as the one loaded first found its own. None where the
    flags do not show that place."""
    if abis.TARGET_FLAG in flags:
        return [f for f in flags if f != abis.TARGET_FLAG], ATEN_HEADERS
    if keys.DEFAULT_CFLAGS[0] not in flags:
        return None
    at = flags.index(keys.DEFAULT_CFLAGS[0])
    return [*flags[:at], abis.TARGET_FLAG, *flags[at:]], STABLE_HEADERS


# ---- the linker ----------------------------------------------------------------------------

GOLD = "-fuse-ld=gold"


def gold_enabled(cxx: str) -> bool:
    """Whether builds with ``cxx`` may link with gold (GCC; not ``JIT_LOADER_GOLD=0``)."""
    return not _off("JIT_LOADER_GOLD") and toolchain.is_gcc(cxx)


def fast_linker(root: Path, cxx: str, ldflags: str, now: bool = True) -> list[str]:
    """``-fuse-ld=gold`` where gold links a small C++ object against torch's libraries
    (probed once per toolchain and link flags), else nothing (the compiler's default linker).
    GNU ld reads every dynamic symbol of libtorch_cpu/libtorch_cuda on each link; gold
    links an op with a fraction of the CPU (experiments/RESULTS.md). Off with
    ``JIT_LOADER_GOLD=0``. With ``now`` false a missing probe raises :class:`shared.Missing`."""
    if not gold_enabled(cxx):
        return []
    key = piece_key("link" + GOLD, cxx, shlex.split(ldflags), "")
    folder = CacheStore(root).shared_folder() / f"link-{key}"

    def probe(tmp: Path, extra: list[str]):
        return run([cxx, GOLD, *extra, "probe.o", *shlex.split(ldflags), "-o", str(tmp / "probe.so")], tmp)

    def make(tmp: Path):
        # An object that needs the C++ runtime, as every op does.
        (tmp / "probe.cpp").write_text('#include <string>\nextern "C" int jit_loader_probe(const char* s) '
                                       '{ return static_cast<int>(std::string(s).size()); }\n')
        ok, log = run([cxx, "-fPIC", "-c", "probe.cpp", "-o", "probe.o"], tmp)
        if not ok:
            return ok, log
        ok, log = probe(tmp, [])
        if ok:
            return ok, log
        # A toolchain whose libstdc++.so development link points nowhere (GNU ld passes
        # over it, gold stops): the compiler's own -lstdc++ then finds the runtime through
        # a link of ours, to the shared library the ops already name by soname.
        runtime = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], capture_output=True,
                                 text=True, timeout=60).stdout.strip()
        if not os.path.isabs(runtime) or not os.path.exists(runtime):
            return ok, log
        os.symlink(os.path.realpath(runtime), tmp / "libstdc++.so")
        ok, second = probe(tmp, [f"-L{tmp}"])
        if ok:
            (tmp / "runtime-link").write_text(runtime + "\n")
        return ok, log + "\nwith a libstdc++.so link of its own:\n" + second

    built = build_piece(folder, make, now)
    if built is None:
        return []
    return [GOLD, f"-L{built}"] if (built / "runtime-link").exists() else [GOLD]


# ---- nvcc -----------------------------------------------------------------------------------

def nvcc_threads() -> int:
    """nvcc's ``--threads``: it then preprocesses a unit's host and device sides at once
    (and compiles several archs at once), instead of one step after the other. The
    objects are the same. Bounded by MAX_JOBS (none at MAX_JOBS=1: one job was asked
    for) and by 4, since Ninja already runs a unit per core."""
    jobs = int(toolchain.max_jobs())
    return min(jobs, 4) if jobs > 1 else 0


NVCC_DRIVER = Path(__file__).with_name("nvcc_parallel.py")


def parallel_nvcc(root: Path, nvcc: str) -> str | None:
    """A shim named ``nvcc`` that compiles through :mod:`jit_tools.builder.nvcc_parallel` (the
    host and device halves of a unit side by side) with this Python and this nvcc; None
    with ``JIT_LOADER_NVCC_PARALLEL=0``. Named nvcc so that ccache treats it as nvcc."""
    if _off("JIT_LOADER_NVCC_PARALLEL"):
        return None
    tokens = shlex.split(nvcc)
    if len(tokens) != 1:
        return None  # a compiler command with options of its own: left as it is
    real = shutil.which(tokens[0]) or tokens[0]
    script = ("#!/bin/sh\n# nvcc with the host and device halves side by side (jit_tools/builder/nvcc_parallel.py)\n"
              f"exec {shlex.quote(sys.executable)} -S -E {shlex.quote(str(NVCC_DRIVER))} "
              f"{shlex.quote(real)} \"$@\"\n")
    key = hashlib.sha256((script + (toolchain.file_identity(real) or "")
                          + hashlib.sha256(NVCC_DRIVER.read_bytes()).hexdigest()).encode()).hexdigest()[:16]

    def make(tmp: Path):
        (tmp / "nvcc").write_text(script)
        (tmp / "nvcc").chmod(0o755)
        return True, script

    built = build_piece(CacheStore(root).shared_folder() / f"nvcc-{key}", make)
    return str(built / "nvcc") if built else None

