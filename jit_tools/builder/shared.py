"""The store of shared pieces: what every op's build, or every process, builds once per
toolchain and uses after (precompiled headers, the linker probe and the nvcc shim of
:mod:`jit_tools.builder.speedups`; the autograd kernel and the fast entry of
:mod:`jit_tools.builder.process_pieces`).

They live in ``<cache>/_shared/``. Each piece sits in a folder named by a hash of
everything that decides its bytes (:func:`piece_key`: the compiler's identity, the exact
flags, the torch version, the registry header's bytes). It is built once, under a lock,
into a temporary name and renamed into place (:func:`build_piece`); a piece unused for
``SHARED_KEEP_DAYS`` is pruned. A piece the compiler refused is marked (``FAILED``) and
never tried again for that key: builds go without it.

A piece missing at the moment a build or a process wants it is built in a detached
background process at low priority (:func:`background`), unless
``JIT_LOADER_SHARED_NOW=1`` asks for it first (:func:`build_now`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from jit_tools import key as keys, layers, locks
from jit_tools.builder import toolchain
from jit_tools.log import logger
from jit_tools.store import CacheStore, folder_bytes, remove_when_free

SHARED_KEEP_DAYS = 30
FAILED = "FAILED"  # marker file: the compiler refused to build this piece


def piece_key(kind: str, cxx: str, flags: list[str], post: str) -> str:
    """The name of a piece's folder: a hash of its kind, the compiler's identity, the flags
    it is built with, torch's build and the loader's registry header."""
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


def background(arg: str, module: str) -> subprocess.Popen | None:
    """``python -m <module> ARG`` as a detached process (its own session, no output):
    the background build of pieces; None where it could not start."""
    if layers.never_compile():  # JIT_LOADER_COMPILE=never: the pieces are not built
        return None
    package_parent = Path(__file__).resolve().parents[2]
    try:
        return subprocess.Popen([sys.executable, "-m", module, arg],
                                cwd=package_parent, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        logger.debug("could not start the background build of shared pieces: %s", e)
        return None


@contextlib.contextmanager
def held_alone(path: Path):
    """Whether this process took ``path``'s lock without waiting (then held for the block)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            locks.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


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
        with held_alone(folder / f"{piece.name}.lock") as alone:
            if not alone:
                continue
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
