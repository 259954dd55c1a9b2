"""Locks that only save work, and publication that needs none.

``flock`` serialises the processes of one host on a local filesystem. On a shared
filesystem it may do nothing (NFS without a working lock service, some FUSE mounts) or
lock within one host only. So the cache's locks only spare duplicate work and the
waits are bounded; what keeps the cache correct needs no lock:

- private staging: a process writes only into folders named for its host and process
  (:func:`private_tag`), never into one another process may write;
- publication by rename: a finished folder takes its final name by one ``rename``, which
  fails when the name is taken, so the first publisher wins and a later one uses the
  winner's (:func:`publish_folder`);
- a file that vanished or was replaced under a reader (``ENOENT``, NFS's ``ESTALE``) is
  looked up again from the start, never reported (:func:`vanished`).

``JIT_LOADER_LOCKS=off`` makes every lock succeed at once without locking: the tests
prove the points above with it, and it is the way out on a filesystem whose locks hang.
A filesystem that refuses locks with an error (``ENOLCK``, ``EOPNOTSUPP``) is treated
the same way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Callable

from jit_tools.errors import CacheError
from jit_tools.log import logger

ENV = "JIT_LOADER_LOCKS"
HOST_ENV = "JIT_LOADER_HOSTNAME"  # tests: processes of one machine that claim other hosts
TMP_PREFIX = ".tmp-"
LOCK_REPORT_SECONDS = 30.0  # how often a waiting process says whom it waits for
PUBLISH_ATTEMPTS = 5
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP}


def enabled() -> bool:
    """False with ``JIT_LOADER_LOCKS=off``."""
    value = os.environ.get(ENV, "on").strip().lower()
    if value in ("", "on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise CacheError(f"{ENV}={value!r} must be on or off")


def flock(fd: int, how: int) -> None:
    """``fcntl.flock(fd, how)``, raising ``BlockingIOError`` for a ``LOCK_NB`` request
    that would wait; nothing at all with locks off or where the filesystem refuses
    locks (then nothing is locked, which the cache survives)."""
    if not enabled():
        return
    try:
        fcntl.flock(fd, how)
    except BlockingIOError:
        raise
    except OSError as e:
        if e.errno not in _NO_LOCKS:
            raise
        logger.debug("no file locks on this filesystem (%s); going on without", e.strerror)


def vanished(e: BaseException) -> bool:
    """True for an error that says a file was moved, removed or replaced under us."""
    return isinstance(e, OSError) and e.errno in (errno.ENOENT, errno.ESTALE)


def host() -> str:
    """This machine's name as staging folders carry it (``JIT_LOADER_HOSTNAME`` in tests)."""
    name = os.environ.get(HOST_ENV, "").strip() or socket.gethostname() or "host"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def private_tag() -> str:
    """``<host>-<pid>``: names a folder or file only this process writes."""
    return f"{host()}-{os.getpid()}"


def owner_gone(tag: str) -> bool:
    """True when the process a :func:`private_tag` names is known to be dead: a process of
    this host that no longer runs. A process of another host is never judged (its pid
    means nothing here); its leftovers go by age."""
    owner, _, pid = tag.rpartition("-")
    if owner != host() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def write_json_atomic(path: Path, value) -> None:
    """``path`` holds ``value`` as JSON, written under a private name and renamed."""
    tmp = path.with_name(f".{path.name}.{private_tag()}")
    try:
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def publish_folder(tmp: Path, dest: Path, valid: Callable[[Path], bool]) -> bool:
    """Give the complete folder ``tmp`` the name ``dest`` by one rename. Where ``dest``
    exists (another process published first), it is kept when ``valid(dest)``: ``tmp`` is
    removed and False returned; an invalid one is renamed aside (then deleted) and the
    rename tried again. True when ``tmp`` is now ``dest``."""
    for _attempt in range(PUBLISH_ATTEMPTS):
        try:
            os.rename(tmp, dest)
            return True
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                raise
        if valid(dest):
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        aside = dest.with_name(f"{TMP_PREFIX}removed-{dest.name}-{private_tag()}")
        with contextlib.suppress(OSError):
            os.rename(dest, aside)
        shutil.rmtree(aside, ignore_errors=True)
    raise CacheError(f"could not publish {dest}: it was replaced {PUBLISH_ATTEMPTS} times "
                     "while this process published its own")


def remove_when_free(folder: Path, lock: Path, create: bool = False) -> bool:
    """Remove ``folder`` unless another process holds a flock on ``lock``: while this one
    holds it exclusively, the folder is renamed out of its place (so nothing finds it
    half-deleted), then deleted. A ``lock`` that does not exist (and is not to be
    created) guards nothing. True when removed."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o644)
    except OSError:
        fd = None
    try:
        if fd is not None:
            try:
                flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        doomed = folder.with_name(f"{TMP_PREFIX}removed-{folder.name}-{private_tag()}")
        try:
            os.rename(folder, doomed)
        except OSError:
            return False
    finally:
        if fd is not None:
            os.close(fd)
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def holder(fd: int) -> tuple[str, float | None]:
    """(pid, start time) that the process holding a build lock wrote into it."""
    fields = os.pread(fd, 64, 0).decode(errors="replace").split()
    pid = fields[0] if fields else "?"
    try:
        return pid, float(fields[1])
    except (IndexError, ValueError):
        return pid, None


def lock_timeout() -> float | None:
    """Seconds to wait for another process's build (``JIT_LOADER_LOCK_TIMEOUT``;
    unset or 0: wait as long as it takes)."""
    text = os.environ.get("JIT_LOADER_LOCK_TIMEOUT", "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise CacheError(f"JIT_LOADER_LOCK_TIMEOUT={text!r} is not a number of seconds") from None
    if value < 0:
        raise CacheError(f"JIT_LOADER_LOCK_TIMEOUT={text!r} must be >= 0 seconds")
    return value or None


def wait_for_lock(fd: int, name: str, quiet: bool) -> None:
    """Take the exclusive flock on ``fd``. While another process holds it, say who and
    since when, again every LOCK_REPORT_SECONDS (a stopped or hung builder otherwise
    looks like a hang), and give up after ``JIT_LOADER_LOCK_TIMEOUT`` seconds."""
    timeout = lock_timeout()  # a bad setting is reported even when nobody holds the lock
    try:
        flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    started = time.monotonic()
    next_report = 0.0
    while True:
        waited = time.monotonic() - started
        pid, since = holder(fd)
        building = (f"since {time.strftime('%H:%M:%S', time.localtime(since))}, "
                    f"{max(0.0, time.time() - since):.0f} s ago" if since else "for an unknown time")
        if timeout is not None and waited >= timeout:
            raise CacheError(
                f"gave up after {waited:.0f} s waiting for process {pid}, which has been building "
                f"op {name!r} {building}: if it is stopped (Ctrl-Z, SIGSTOP) resume it with "
                f"kill -CONT {pid}, if it hangs kill it, or raise JIT_LOADER_LOCK_TIMEOUT")
        if not quiet and waited >= next_report:
            logger.info("waiting for process %s that is building %r (%s)...", pid, name, building)
            next_report = waited + LOCK_REPORT_SECONDS
        time.sleep(0.05 if waited < 1 else 0.25)
        try:
            flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


@contextlib.contextmanager
def briefly(path: Path, seconds: float = 1.0):
    """An exclusive flock on ``path`` for a short read-modify-write, waited for at most
    ``seconds``; after that the block runs unlocked (what it writes is a tally that may
    then miss a count, never a file that is half written)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + seconds
        while True:
            try:
                flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)


class Vanished(CacheError):
    """A build was removed or replaced by another process between finding and loading
    it: the load looks for it again (never shown to the user unless it keeps happening)."""
