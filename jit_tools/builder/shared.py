"""Build pieces shared by every op with the same toolchain: a precompiled header of the
lean header set (ATen/ATen.h + torch/library.h, or the stable ABI's set) for the ops'
C++ units, the probe that picks the gold linker, and ccache in front of the compilers.

They live in ``<cache>/_shared/`` (ccache's store in ``<cache>/_ccache/``). Each piece
sits in a folder named by a hash of everything that decides its bytes: the compiler's
identity, the exact flags the op's units use (less the op's name and own folder), the
torch version and the registry header's bytes. It is built once, under a lock, into a temporary
name and renamed into place; a piece unused for ``SHARED_KEEP_DAYS`` is pruned.

None of them changes what an op computes, so none enters the op's cache key; a build
that cannot use a piece (no ccache, a compiler that refuses the header) builds as
before.

A piece pays from the second build of its toolchain and flags on; building it first
would put it on the critical path of the first (the precompiled header alone takes
longer than a tiny op). So a build uses the pieces that exist (and ccache only where none
is missing: a flag set's first build is all cache misses), and once it has succeeded
starts the missing pieces
in a background process (``build_later``) at low priority: the next build with those
flags finds them. ``JIT_LOADER_SHARED_NOW=1`` builds them first instead (the test suite,
which builds many ops with one toolchain, does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from jit_tools import abi as abis, key as keys, layers, locks
from jit_tools.builder import toolchain
from jit_tools.log import logger
from jit_tools.store import CacheStore, folder_bytes, remove_when_free

PCH_HEADER = "jit_loader_lean.h"
PCH_TEXT = "// The lean header set the ops' C++ units use, precompiled once.\n" \
           "#pragma once\n#include <ATen/ATen.h>\n#include <torch/library.h>\n"
STABLE_PCH_HEADER = "jit_loader_stable.h"  # the stable ABI's set: jit_tools/abi.py
SHARED_KEEP_DAYS = 30
FAILED = "FAILED"  # marker file: the compiler refused to build this piece


def _off(var: str) -> bool:
    return os.environ.get(var, "1").strip().lower() in ("0", "false", "no", "off")


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


_GCC: dict[str, bool] = {}


def is_gcc(cxx: str) -> bool:
    """True when the C++ compiler is GCC (its .gch precompiled headers)."""
    ident = toolchain.file_identity(shutil.which(cxx)) or cxx
    if ident not in _GCC:
        try:
            out = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _GCC[ident] = "Free Software Foundation" in out and "clang" not in out.lower()
    return _GCC[ident]


def _ninja_vars(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+) = ?(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def common_flags(cflags: str, name: str, private_dirs) -> list[str]:
    """The op's C++ flags less what is the op's own: its name define and the -I of its
    own folders (the header set includes neither), and the registry
    header's -include (the header set is precompiled without it)."""
    private = {f"-I{d}" for d in private_dirs}
    tokens = shlex.split(cflags)
    out, skip = [], False
    for i, tok in enumerate(tokens):
        if skip:
            skip = False
            continue
        if tok.startswith("-DTORCH_EXTENSION_NAME=") or tok in private:
            continue
        if tok == "-include" and i + 1 < len(tokens) and tokens[i + 1] in REGISTRY_HEADERS:
            skip = True
            continue
        out.append(tok)
    return out


REGISTRY_HEADERS = (str(keys.REGISTRY_HEADER), str(abis.STABLE_REGISTRY_HEADER))


def piece_key(kind: str, cxx: str, flags: list[str], post: str) -> str:
    ident = toolchain.file_identity(shutil.which(cxx)) or cxx
    text = "\0".join([kind, ident, *flags, post, torch.__version__,
                      str(getattr(torch.version, "git_version", "")), keys.SUPPORT_HASH])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        locks.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def build_now() -> bool:
    """``JIT_LOADER_SHARED_NOW=1``: build missing pieces before the op, not after it."""
    if layers.never_compile():  # JIT_LOADER_COMPILE=never: no piece is built, now or later
        return False
    return os.environ.get("JIT_LOADER_SHARED_NOW", "0").strip().lower() in ("1", "true", "yes", "on")


class Missing(Exception):
    """A piece that is not built yet, and was not to be built now."""


def build_piece(folder: Path, make, now: bool = True) -> Path | None:
    """``folder`` complete (built by ``make(tmp_folder)`` under a lock if missing); None
    when building it failed before (marker) or now. With ``now`` false a missing piece
    raises :class:`Missing` instead of being built."""
    if (folder / "ok").exists():
        with contextlib.suppress(OSError):
            os.utime(folder / "ok")
        return folder
    if (folder / FAILED).exists():
        return None
    if not now:
        raise Missing(folder.name)
    with _lock(folder.parent / f"{folder.name}.lock"):
        if (folder / "ok").exists():
            return folder
        if (folder / FAILED).exists():
            return None
        tmp = folder.parent / f".tmp-{folder.name}-{locks.private_tag()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        started = time.perf_counter()
        logger.info("building the shared piece %s (once for every op of this toolchain)", folder.name)
        try:
            ok, log = make(tmp)
        except OSError as e:
            ok, log = False, str(e)
        (tmp / "build.log").write_text(log)
        if ok:
            (tmp / "ok").write_text(f"{time.perf_counter() - started:.2f}\n")
        else:
            (tmp / FAILED).write_text(log[-4000:])
            logger.info("shared build piece %s could not be built; building without it:\n%s",
                        folder.name, log[-2000:])
        # Where the lock locked nothing, another process may have published it first.
        if not locks.publish_folder(tmp, folder, lambda f: (f / "ok").exists()):
            return folder
    return folder if ok else None


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[bool, str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace",
                          env=dict(os.environ, **(env or {})))
    return proc.returncode == 0, shlex.join(cmd) + "\n" + proc.stdout + proc.stderr


def precompiled_header(root: Path, cxx: str, flags: list[str], post: str,
                       header: str = PCH_HEADER, text: str = PCH_TEXT,
                       now: bool = True) -> Path | None:
    """A header set (the lean ATen one, or the stable ABI's) precompiled with exactly
    the units' flags: the path of the header (its .gch beside it), or None where
    disabled or refused."""
    if _off("JIT_LOADER_PCH") or not is_gcc(cxx):
        return None
    folder = CacheStore(root).shared_folder() / f"pch-{piece_key('pch' + text, cxx, flags, post)}"

    def make(tmp: Path):
        (tmp / header).write_text(text)
        (tmp / "flags.json").write_text(json.dumps(
            {"family": _pch_family(cxx, flags, post, text), "flags": flags}))
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


def _pch_family(cxx: str, flags: list[str], post: str, text: str) -> str:
    """The key of ``flags`` less their macro definitions: precompiled headers of one
    family differ only in ``-D``/``-U`` flags."""
    return piece_key("pch" + text, cxx, [f for f in flags if not _is_define(f)], post)


def sibling_header(root: Path, cxx: str, flags: list[str], post: str,
                   header: str = PCH_HEADER, text: str = PCH_TEXT) -> Path | None:
    """A header set precompiled with ``flags`` less some of their ``-D``/``-U`` flags (a
    flag set that adds macros to one built before, e.g. ``-DVARIANT_A``): GCC itself
    checks, on each use, that no macro the header set reads is defined differently, and
    reads the header's text instead where one is (``-Winvalid-pch`` says so; see
    :func:`sibling_refused`). The most recently used such header, or None."""
    if _off("JIT_LOADER_PCH") or not is_gcc(cxx) or not any(map(_is_define, flags)):
        return None
    family = _pch_family(cxx, flags, post, text)
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
    pch_checksum(folder / (header + ".gch"))
    return folder / header


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


def _link_folder(root: Path, cxx: str, ldflags: str) -> Path:
    return CacheStore(root).shared_folder() / f"link-{piece_key('link-fuse-ld=gold', cxx, shlex.split(ldflags), '')}"


def fast_linker(root: Path, cxx: str, ldflags: str, now: bool = True) -> list[str]:
    """``-fuse-ld=gold`` where gold links a small C++ object against torch's libraries
    (probed once per toolchain and link flags), else nothing (the compiler's default linker).
    GNU ld reads every dynamic symbol of libtorch_cpu/libtorch_cuda on each link; gold
    links an op with a fraction of the CPU (experiments/RESULTS.md). Off with
    ``JIT_LOADER_GOLD=0``."""
    if _off("JIT_LOADER_GOLD") or not is_gcc(cxx):
        return []
    flag = "-fuse-ld=gold"
    folder = _link_folder(root, cxx, ldflags)

    def probe(tmp: Path, extra: list[str]):
        return run([cxx, flag, *extra, "probe.o", *shlex.split(ldflags), "-o", str(tmp / "probe.so")], tmp)

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
    return [flag, f"-L{built}"] if (built / "runtime-link").exists() else [flag]


_LINK_RULE = re.compile(r"^(rule link\n  command = )\$cxx \$in \$ldflags -o \$out$", re.M)


def _gold_else_default(ninja_text: str, cxx: str) -> tuple[str, bool]:
    """Before the probe of :func:`fast_linker` has run (a toolchain's first build): the link
    rule tries gold and, where gold fails, links again with the default linker (whose
    messages are the ones shown). An op's first build then links as fast as later ones
    without waiting for the probe; the probe, built after it, spares later builds the
    failed try where gold does not work."""
    if _off("JIT_LOADER_GOLD") or not is_gcc(cxx):
        return ninja_text, False
    new = _LINK_RULE.sub(lambda m: m.group(1) + "$cxx $in -fuse-ld=gold $ldflags -o $out 2>/dev/null"
                         " || $cxx $in $ldflags -o $out", ninja_text, count=1)
    return new, new != ninja_text


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


WRAPPERS = ("ccache", "sccache")


def unwrap(command: str) -> str:
    """A compiler command less the compiler cache that ``cpp_extension`` puts in front
    of it when one is on PATH (torch 2.12 and later): the loader runs its own ccache,
    with its own settings, and probes and keys the compiler itself."""
    tokens = shlex.split(command)
    while len(tokens) > 1 and os.path.basename(tokens[0]) in WRAPPERS:
        tokens = tokens[1:]
    return shlex.join(tokens)


def other_abi(flags: list[str]) -> dict | None:
    """The flags, header name and text of the other ABI's header set, for the same op
    folders, compiler and options as ``flags`` (a stable op's flags less the target
    version, or an ATen op's with it, where the loader's own flags begin): built after a
    flag set's own pieces, so that an op of the other ABI finds it, as the one loaded first
    found its own. None where the flags do not show that place."""
    if abis.TARGET_FLAG in flags:
        return {"flags": [f for f in flags if f != abis.TARGET_FLAG], "pch_header": PCH_HEADER,
                "pch_text": PCH_TEXT}
    if keys.DEFAULT_CFLAGS[0] not in flags:
        return None
    at = flags.index(keys.DEFAULT_CFLAGS[0])
    return {"flags": [*flags[:at], abis.TARGET_FLAG, *flags[at:]], "pch_header": STABLE_PCH_HEADER,
            "pch_text": abis.STABLE_PCH_TEXT}


def pieces_for(ninja_text: str) -> tuple[str, str]:
    """(precompiled header name, its text) for the ABI a build.ninja speaks: a stable
    build's units include the stable registry header and nothing of ATen, so their
    header set is the stable one."""
    if str(abis.STABLE_REGISTRY_HEADER) in ninja_text:
        return STABLE_PCH_HEADER, abis.STABLE_PCH_TEXT
    return PCH_HEADER, PCH_TEXT


# The options file of the precompiled header in the op's work folder. Ninja recompiles a
# unit whose command changed, and the pieces change no object: a unit compiled before its
# flag set's pieces existed is the object it compiles to with them. So what the pieces
# put on a unit's line, the header and ccache, is there from the first build on, the
# header's flags inside this file (empty until the header exists) and ccache switched off
# until the pieces exist; the first edit after they appear recompiles the edited unit
# only, not every unit again.
PIECES_RSP = "pieces.rsp"


def apply(work: Path, name: str, private_dirs, root: Path) -> dict:
    """Rewrite the op's build.ninja to use the shared pieces; returns the environment
    additions for Ninja (ccache settings) and what was used, under "used"."""
    path = work / "build.ninja"
    text = path.read_text()
    v = _ninja_vars(text)
    cxx, post = unwrap(v.get("cxx", "c++")), v.get("post_cflags", "")
    for var in ("cxx", "nvcc"):
        if var in v:
            text = re.sub(rf"^{var} = .*$", lambda m: f"{var} = {unwrap(v[var])}", text,
                          count=1, flags=re.M)
    flags = common_flags(v.get("cflags", ""), name, private_dirs)
    used = {"ccache": False, "pch": False, "linker": "default"}
    env: dict = {}
    pch_header, pch_text = pieces_for(text)
    ldflags = v.get("ldflags", "")
    later = {"root": str(root), "cxx": cxx, "flags": flags, "post": post, "ldflags": ldflags,
             "pch_header": pch_header, "pch_text": pch_text, "other_abi": other_abi(flags)}
    missing: list[str] = []
    if build_now():
        pch, linker = _pieces_now(later)
    else:
        pch, linker, missing = _pieces_built(later)
    # ccache joins from a flag set's second build, as the other pieces do: the first
    # build of a flag set (often a one-off) is all misses, on each of which ccache hashes
    # every header the unit read and stores the object. It stays on the command line,
    # switched off (CCACHE_DISABLE runs the compiler directly), so that the commands are
    # the same once the pieces exist (see PIECES_RSP).
    launch = ccache()
    if launch and missing:
        env["CCACHE_DISABLE"] = "1"
    elif launch:
        env.update(ccache_env(root))
        CacheStore(root).ccache_folder().mkdir(parents=True, exist_ok=True)
        used["ccache"] = True
    if missing:
        if pch is None and (sibling := sibling_header(root, cxx, flags, post, pch_header, pch_text)):
            # The exact header is built only if GCC turns the sibling down.
            pch, used["pch_sibling"] = sibling, sibling.parent.name
            pch_piece = [m for m in missing if m.startswith("pch-")]
            missing = [m for m in missing if m not in pch_piece]
            if pch_piece:
                env["if_refused"] = {"later": later, "names": pch_piece}
        if missing:
            used["later"] = missing
            env["later"] = later
    if any(m.startswith("link-") for m in missing):
        text, tried = _gold_else_default(text, cxx)
        if tried:
            used["linker"] = "gold, else default"
    if linker:
        text = re.sub(r"^ldflags = ", lambda m: f"ldflags = {shlex.join(linker)} ", text, count=1, flags=re.M)
        used["linker"] = "gold"
    # First on the line: a precompiled header must come before any other token. Read by
    # the compiler from a file (GCC's and ccache's @file), so that the units' commands
    # stay the same whether the header exists yet or not (see PIECES_RSP).
    (work / PIECES_RSP).write_text(
        f"-include {shlex.quote(str(pch))} -Winvalid-pch\n" if pch is not None else "")
    text = re.sub(r"^cflags = ", lambda m: f"cflags = {shlex.quote('@' + str(work / PIECES_RSP))} ",
                  text, count=1, flags=re.M)
    used["pch"] = pch is not None
    if "nvcc" in v:
        shim = parallel_nvcc(root, unwrap(v["nvcc"]))
        if shim:
            text = re.sub(r"^nvcc = .*$", lambda m: f"nvcc = {shlex.quote(shim)}", text,
                          count=1, flags=re.M)
            used["nvcc"] = "parallel"
    threads = nvcc_threads() if re.search(r"^cuda_cflags = ", text, flags=re.M) else 0
    if threads:
        text = re.sub(r"^cuda_cflags = ", lambda m: f"cuda_cflags = --threads {threads} ", text,
                      count=1, flags=re.M)
        used["nvcc_threads"] = threads
    if launch:
        text = re.sub(r"^cxx = ", lambda m: f"cxx = {shlex.quote(launch)} ", text, count=1, flags=re.M)
        text = re.sub(r"^nvcc = ", lambda m: f"nvcc = {shlex.quote(launch)} ", text, count=1, flags=re.M)
    path.write_text(text)
    env["used"] = used
    return env


def _pieces_now(spec: dict):
    """(pch, linker) built where missing; the header and the linker probe side by side
    (each under its own lock) unless MAX_JOBS=1."""
    root = Path(spec["root"])
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        make_linker = lambda: fast_linker(root, spec["cxx"], spec["ldflags"])
        link_job = pool.submit(make_linker) if toolchain.max_jobs() != "1" else None
        pch = precompiled_header(root, spec["cxx"], spec["flags"], spec["post"],
                                 spec["pch_header"], spec["pch_text"])
        linker = link_job.result() if link_job is not None else make_linker()
    return pch, linker


def _pieces_built(spec: dict):
    """(pch, linker, names of the missing pieces): only pieces built before."""
    root, missing = Path(spec["root"]), []
    pch = None
    linker: list[str] = []
    try:
        pch = precompiled_header(root, spec["cxx"], spec["flags"], spec["post"],
                                 spec["pch_header"], spec["pch_text"], now=False)
    except Missing as e:
        missing.append(str(e))
    try:
        linker = fast_linker(root, spec["cxx"], spec["ldflags"], now=False)
    except Missing as e:
        missing.append(str(e))
    return pch, linker, missing


def build_later(spec: dict) -> None:
    """Build the missing pieces of ``spec`` in a detached background process at low
    priority (after the op's own build, so that they never delay it)."""
    background(spec)


def background(spec: dict, module: str = __name__) -> subprocess.Popen | None:
    """``python -m <module> SPEC`` as a detached process (its own session, no output):
    the background build of pieces; None where it could not start."""
    if layers.never_compile():  # JIT_LOADER_COMPILE=never: the pieces are not built
        return None
    package_parent = Path(__file__).resolve().parents[2]
    try:
        return subprocess.Popen([sys.executable, "-m", module, json.dumps(spec)],
                                cwd=package_parent, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        logger.debug("could not start the background build of shared pieces: %s", e)
        return None


def _main(argv: list[str]) -> int:
    """``python -m jit_tools.builder.shared SPEC``: the background build of ``build_later``. One
    at a time per folder of pieces: builds that finish while it runs (each starts one)
    leave their pieces to the next build's background process instead of queueing."""
    spec = json.loads(argv[0])
    folder = CacheStore(Path(spec["root"])).shared_folder()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "background.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        locks.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    with contextlib.suppress(OSError):
        os.nice(10)
    _pieces_now(spec)
    other = spec.get("other_abi")
    if other is not None:
        precompiled_header(Path(spec["root"]), spec["cxx"], other["flags"], spec["post"],
                           other["pch_header"], other["pch_text"])
    return 0


def prune(root: Path, days: float = SHARED_KEEP_DAYS) -> list[Path]:
    """Remove shared pieces not used for ``days`` (their lock free); returns them."""
    removed = []
    folder = CacheStore(root).shared_folder()
    if not folder.is_dir():
        return removed
    cutoff = time.time() - days * 86400
    for piece in folder.iterdir():
        if not piece.is_dir():
            continue
        stamp = piece / ("ok" if (piece / "ok").exists() else FAILED)
        try:
            if stamp.stat().st_mtime >= cutoff:
                continue
        except OSError:
            if piece.name.startswith(".tmp-") and piece.stat().st_mtime >= cutoff:
                continue
        lock = folder / f"{piece.name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locks.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        finally:
            os.close(fd)
        shutil.rmtree(piece, ignore_errors=True)
        removed.append(piece)
    return removed


def pieces(root: Path) -> list[dict]:
    """The shared pieces of the cache at ``root``: one dict per piece folder with its
    ``path``, ``kind`` (pch, link, nvcc, autograd...), ``bytes``, ``last_used`` (the time a
    build last used it) and ``ok`` (False: the compiler refused it; builds go without)."""
    folder = CacheStore(root).shared_folder()
    out = []
    if not folder.is_dir():
        return out
    for piece in sorted(folder.iterdir()):
        if not piece.is_dir():
            continue
        stamp = piece / "ok"
        try:
            last = (stamp if stamp.exists() else piece).stat().st_mtime
        except OSError:
            continue
        out.append({"path": str(piece), "kind": piece.name.split("-", 1)[0].lstrip("."),
                    "bytes": folder_bytes(piece), "last_used": last, "ok": stamp.exists()})
    return out


def remove_piece(root: Path, piece: Path) -> bool:
    """Remove one piece unless it is being built (its lock taken without waiting). The
    caller makes sure no build of this cache runs (it holds every op's build lock)."""
    return remove_when_free(piece, CacheStore(root).shared_folder() / f"{piece.name}.lock", create=True)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
