"""The on-disk build cache. :class:`CacheStore` alone knows its layout and its locks.

Layout under the cache root (``JIT_LOADER_CACHE``, else ``$XDG_CACHE_HOME/jit_loader``)::

    <op>/build.lock            flock held while a process builds <op>; holds its pid
    <op>/work-<tag>/           Ninja working folder, one per op folder and configuration
    <op>/builds/<key>/         a complete build: <op>.so, build.log, manifest.json
    <op>/builds/.tmp-<key>-<pid>/   a build being published (renamed to <key> when done)
    _inline/<name>/            sources written by load_inline (an op folder like any other)

A build is complete only once ``builds/<key>/manifest.json`` exists: it is written last,
inside the ``.tmp-`` folder, and the folder appears under its key by an atomic rename.
A process using a build holds a shared flock on its manifest, so cleaning can tell.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from jit_tools.errors import CacheError
from jit_tools.log import logger

DEFAULT_KEEP = 8
LOCK_REPORT_SECONDS = 30.0  # how often a waiting process says whom it waits for
VERIFIED = "verified.json"  # stat signature of the library when its hash last matched
TMP_PREFIX = ".tmp-"
STALE_TMP_SECONDS = 3600  # an unfinished .tmp- folder this old belongs to a dead process


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json_atomic(path: Path, value) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def cache_path() -> list[Path]:
    """The cache folders, in search order: ``JIT_LOADER_CACHE`` split at ``:`` (else
    ``$XDG_CACHE_HOME/jit_loader``). Every folder but the last is a read-only layer
    (e.g. a prebuilt cache on a shared filesystem); new builds go to the last."""
    env = os.environ.get("JIT_LOADER_CACHE")
    if env:
        # Absolute: Ninja runs inside the cache, where a relative path means another place.
        return [Path(os.path.abspath(os.path.expanduser(part)))
                for part in env.split(os.pathsep) if part.strip()]
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [Path(xdg) / "jit_loader"]


def cache_dir() -> Path:
    """The writable cache folder, where new builds go (the last of :func:`cache_path`)."""
    return cache_path()[-1]


def current() -> "CacheStore":
    """The writable store (read from the environment at each call)."""
    return CacheStore(cache_dir())


def layers() -> list["CacheStore"]:
    """Every store a load searches, in order: read-only layers first, then the writable."""
    path = cache_path()
    return [CacheStore(root, readonly=i < len(path) - 1) for i, root in enumerate(path)]


def keep_count() -> int:
    """Builds kept per op (``JIT_LOADER_KEEP``)."""
    try:
        return max(1, int(os.environ.get("JIT_LOADER_KEEP", DEFAULT_KEEP)))
    except ValueError:
        logger.warning("JIT_LOADER_KEEP=%r is not a number; keeping %d builds",
                       os.environ["JIT_LOADER_KEEP"], DEFAULT_KEEP)
        return DEFAULT_KEEP


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``500M``, ``10G`` or ``1.5T`` (binary units)."""
    import re
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None:
        raise CacheError(f"size {text!r} is not a size such as 500M, 10G or 1.5T")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def max_size() -> int | None:
    """The cache's size bound in bytes (``JIT_LOADER_MAX_SIZE``; unset: none)."""
    text = os.environ.get("JIT_LOADER_MAX_SIZE", "").strip()
    return parse_size(text) if text else None


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it is gone)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


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
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        doomed = folder.with_name(f"{TMP_PREFIX}removed-{folder.name}-{os.getpid()}")
        try:
            os.rename(folder, doomed)
        except OSError:
            return False
    finally:
        if fd is not None:
            os.close(fd)
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def _holder(fd: int) -> tuple[str, float | None]:
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


def _wait_for_lock(fd: int, name: str, quiet: bool) -> None:
    """Take the exclusive flock on ``fd``. While another process holds it, say who and
    since when, again every LOCK_REPORT_SECONDS (a stopped or hung builder otherwise
    looks like a hang), and give up after ``JIT_LOADER_LOCK_TIMEOUT`` seconds."""
    timeout = lock_timeout()  # a bad setting is reported even when nobody holds the lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    started = time.monotonic()
    next_report = 0.0
    while True:
        waited = time.monotonic() - started
        pid, since = _holder(fd)
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
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


class CacheStore:
    def __init__(self, root: Path, readonly: bool = False):
        self.root = Path(root)
        self.readonly = readonly  # a layer that is searched, never written

    # ---- layout --------------------------------------------------------------------

    def op_folder(self, name: str) -> Path:
        return self.root / name

    @staticmethod
    def of_build(entry: str | os.PathLike) -> tuple["CacheStore", str, str]:
        """(store, op, key) of a build folder ``<root>/<op>/builds/<key>``."""
        entry = Path(entry)
        return CacheStore(entry.parent.parent.parent), entry.parent.parent.name, entry.name

    def shared_folder(self) -> Path:
        """The pieces every op's build shares (jit_tools/builder/shared.py):
        ``JIT_LOADER_SHARED_DIR`` (e.g. one folder for many private caches, as a test
        session has), else ``_shared``."""
        env = os.environ.get("JIT_LOADER_SHARED_DIR", "").strip()
        return Path(env) if env else self.root / "_shared"

    def owns_shared_folder(self) -> bool:
        """Whether the shared pieces live inside this cache (not a ``JIT_LOADER_SHARED_DIR``
        that other caches' builds use too, which a clean of this cache cannot see)."""
        return self.shared_folder() == self.root / "_shared"

    def ccache_folder(self) -> Path:
        """ccache's store (``CCACHE_DIR``) of this cache's builds."""
        return self.root / "_ccache"

    def builds_folder(self, name: str) -> Path:
        return self.root / name / "builds"

    def entry(self, name: str, key: str) -> Path:
        return self.builds_folder(name) / key

    def work_folder(self, name: str, tag: str) -> Path:
        return self.root / name / f"work-{tag}"

    def work_folders(self, name: str) -> list[Path]:
        return sorted(self.op_folder(name).glob("work-*"))

    def nvrtc_folder(self, name: str) -> Path:
        """Where jit_tools/swap/nvrtc.py keeps an op's kernels compiled with NVRTC."""
        return self.root / name / "nvrtc"

    def inline_folder(self, name: str) -> Path:
        return self.root / "_inline" / name

    def inline_root(self) -> Path:
        return self.root / "_inline"

    def op_names(self) -> list[str]:
        """Names of the ops that have a folder of builds in the cache."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "builds").is_dir())

    def leftovers(self, name: str) -> list[Path]:
        """Half-written build folders that an interrupted build left."""
        builds = self.builds_folder(name)
        return sorted(builds.glob(TMP_PREFIX + "*")) if builds.is_dir() else []

    def ensure_op(self, name: str) -> Path:
        """Create the op's cache folder; CacheError naming the fix when that fails."""
        folder = self.op_folder(name)
        try:
            (folder / "builds").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(
                f"cannot create the cache directory {folder} ({e.strerror}); "
                "set JIT_LOADER_CACHE to a writable folder") from e
        if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
            raise CacheError(
                f"the cache directory {folder} is not readable and writable by this user; "
                "fix its permissions or set JIT_LOADER_CACHE to another folder")
        return folder

    # ---- reading builds --------------------------------------------------------------

    def manifest(self, name: str, key: str, verify: str = "changed") -> dict | None:
        """The manifest of a complete build, or None (missing, unreadable, truncated,
        or its library's bytes differ from the hash recorded at publication).

        ``verify``: "full" hashes the library; "changed" (what a load does) hashes it
        only when its inode, size or ctime differ from the last time it was verified
        (any write or utime changes the ctime), so a warm load costs a stat; "size"
        checks the size alone."""
        entry = self.entry(name, key)
        try:
            manifest = json.loads((entry / "manifest.json").read_text())
            lib = entry / manifest["library"]
            st = lib.stat()
            if st.st_size != manifest["size"]:
                return None
            recorded = manifest.get("sha256")
            if verify == "size" or recorded is None:
                return manifest
            signature = [st.st_ino, st.st_size, st.st_ctime_ns]
            stamp = entry / VERIFIED
            if verify == "changed" and _read_json(stamp) == signature:
                return manifest
            if file_sha256(lib) != recorded:
                return None
            if not self.readonly:
                with contextlib.suppress(OSError):
                    _write_json_atomic(stamp, signature)
            return manifest
        except (OSError, ValueError, KeyError):
            return None

    def library(self, name: str, key: str, manifest: dict) -> Path:
        return self.entry(name, key) / manifest["library"]

    def builds(self, name: str, verify: str = "changed") -> list[dict]:
        """Manifests of the builds of op ``name``, newest first, each with ``path``,
        ``valid`` (library present, with the recorded size and, as ``verify`` says in
        :meth:`manifest`, hash) and ``in_use``."""
        builds = self.builds_folder(name)
        out = []
        if not builds.is_dir():
            return out
        for entry in builds.iterdir():
            if entry.name.startswith(TMP_PREFIX):
                continue
            try:
                manifest = json.loads((entry / "manifest.json").read_text())
            except (OSError, ValueError):
                try:
                    manifest = {"key": entry.name, "name": name, "created": entry.stat().st_mtime}
                except OSError:
                    continue  # removed meanwhile (pruned by a process that built the op)
            manifest["path"] = str(entry)
            manifest["valid"] = self.manifest(name, entry.name, verify) is not None
            manifest["in_use"] = self.in_use(entry)
            out.append(manifest)
        out.sort(key=lambda m: m.get("created", 0), reverse=True)
        return out

    @staticmethod
    def problem(build: dict) -> str:
        """Why a build listed by :meth:`builds` is not valid, in words."""
        entry = Path(build["path"])
        if "library" not in build:
            return "no readable manifest.json"
        lib = entry / build["library"]
        if not lib.is_file():
            return f"library {lib.name} is missing"
        size = lib.stat().st_size
        if size != build.get("size"):
            return (f"library {lib.name} is truncated or altered ({size} bytes, manifest says "
                    f"{build.get('size')})")
        if build.get("sha256") and file_sha256(lib) != build["sha256"]:
            return (f"library {lib.name} is corrupt: its bytes differ from the sha256 recorded "
                    "when it was built (the next load rebuilds it)")
        return "manifest and library disagree"

    # ---- locks ----------------------------------------------------------------------

    @contextlib.contextmanager
    def build_lock(self, name: str, quiet: bool = False):
        """Exclusive flock for building one op; yields its descriptor. The kernel drops
        it if this process dies, so there is never a stale lock to wait on."""
        path = self.ensure_op(name) / "build.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _wait_for_lock(fd, name, quiet)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {time.time():.0f}".encode(), 0)
            yield fd
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing releases the flock

    @contextlib.contextmanager
    def build_lock_if_free(self, name: str):
        """Take op ``name``'s build lock without waiting. Yields None while we hold it
        (no build of the op can start or be running), else the builder's process id.
        Builds write work folders and ``.tmp-`` folders only under this lock, so
        holding it makes removing them safe."""
        try:
            fd = os.open(self.op_folder(name) / "build.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield "?"
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield _holder(fd)[0]
                return
            yield None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def loading(self, name: str):
        """Shared flock on ``<op>/use.lock`` for the whole of a load: from looking for a
        build, through waiting for another process's build, to holding the one found.
        Cleaning takes it exclusively, so it never removes a build between the moment a
        process finds (or is about to be handed) it and the moment it holds it."""
        if self.readonly:
            yield
            return
        try:
            fd = os.open(self.ensure_op(name) / "use.lock", os.O_RDONLY | os.O_CREAT, 0o644)
        except (OSError, CacheError):
            yield  # an unwritable cache: the load reports it where it writes
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def quiet(self, name: str):
        """Exclusive access for cleaning op ``name``: yields None while no process builds
        it or is loading it (its build lock and ``use.lock`` taken without waiting), else
        a few words saying which process is busy with it. Nothing is left to wait for."""
        with self.build_lock_if_free(name) as builder:
            if builder is not None:
                yield f"process {builder} is building {name} now"
                return
            try:
                fd = os.open(self.op_folder(name) / "use.lock", os.O_RDONLY | os.O_CREAT, 0o644)
            except OSError:
                yield None
                return
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield f"a process is loading {name} now"
                    return
                yield None
            finally:
                os.close(fd)

    def hold(self, name: str, key: str):
        """Keep a shared flock on a build while this process uses it (close to release),
        so that cleaning can tell it is in use."""
        entry = self.entry(name, key)
        fd = os.open(entry / "manifest.json", os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not self.readonly:
            with contextlib.suppress(OSError):
                os.utime(entry)  # last use: what JIT_LOADER_MAX_SIZE keeps longest
        return os.fdopen(fd, "rb")

    @staticmethod
    def in_use(entry: str | os.PathLike) -> bool:
        """True when a live process holds the build folder (a shared flock on it)."""
        try:
            fd = os.open(Path(entry) / "manifest.json", os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    # ---- writing builds ---------------------------------------------------------------

    def publish(self, name: str, key: str, library: Path, log: Path, manifest: dict) -> dict:
        """Copy a finished build into ``builds/<key>`` atomically. Caller holds the build
        lock. Returns the manifest written (``manifest`` plus library name and size)."""
        tmp = self.builds_folder(name) / f"{TMP_PREFIX}{key}-{os.getpid()}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            shutil.copy2(library, tmp / library.name)
            shutil.copy2(log, tmp / "build.log")
            manifest = {**manifest, "key": key, "name": name, "library": library.name,
                        "size": (tmp / library.name).stat().st_size,
                        "sha256": file_sha256(tmp / library.name)}
            with open(tmp / "manifest.json", "w") as f:
                json.dump(manifest, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            entry = self.entry(name, key)
            shutil.rmtree(entry, ignore_errors=True)  # an invalid (e.g. truncated) one
            os.rename(tmp, entry)
            with contextlib.suppress(OSError):  # just hashed: the first load needs no re-hash
                st = (entry / library.name).stat()
                _write_json_atomic(entry / VERIFIED, [st.st_ino, st.st_size, st.st_ctime_ns])
            return manifest
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def cache_error(self, e: OSError, doing: str) -> CacheError | None:
        """The CacheError that explains ``e`` (disk full, not writable), or None."""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return CacheError(
                f"disk full while {doing} in {self.root}: free space or point "
                "JIT_LOADER_CACHE elsewhere (the cache was left consistent)")
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return CacheError(
                f"cannot write to the cache {self.root} ({e.strerror}: {e.filename}); "
                "set JIT_LOADER_CACHE to a writable folder")
        return None

    def discard(self, name: str, key: str) -> None:
        shutil.rmtree(self.entry(name, key), ignore_errors=True)

    def remove(self, entry: str | os.PathLike) -> bool:
        """Delete one build unless a live process holds it; True when removed. The build
        leaves its key by a rename while its manifest is locked, so no process can take
        it into use half-deleted."""
        entry = Path(entry)
        return remove_when_free(entry, entry / "manifest.json") and not entry.exists()

    def bytes_used(self) -> int:
        """Bytes of everything under the cache folder."""
        return folder_bytes(self.root)

    def least_recently_used(self) -> list[tuple[float, str, Path]]:
        """Every build of every op as (last use, op, folder), least recently used first."""
        out = []
        for name in self.op_names():
            for entry in self.builds_folder(name).iterdir():
                if entry.name.startswith(TMP_PREFIX):
                    continue
                with contextlib.suppress(OSError):
                    out.append((entry.stat().st_mtime, name, entry))
        out.sort()
        return out

    def shrink(self, bound: int, building: tuple[str, str] | None = None) -> list[Path]:
        """Remove least recently used builds until the cache holds at most ``bound``
        bytes. Never a build a process holds, nor one of an op a process is building or
        loading; ``building`` is (op, key) of the build this process has just published
        while it holds that op's build lock (the key is kept, the op's other builds may go).
        Returns the folders removed."""
        removed = []
        used = self.bytes_used()
        for _last, name, entry in self.least_recently_used():
            if used <= bound:
                break
            if building is not None and (name, entry.name) == building:
                continue
            size = folder_bytes(entry)
            if building is not None and name == building[0]:
                gone = self.remove(entry)
            else:
                with self.quiet(name) as busy:
                    gone = busy is None and self.remove(entry)
            if gone:
                used -= size
                removed.append(entry)
        return removed

    def prune(self, name: str, keep_key: str) -> None:
        """Bound the builds kept per op (JIT_LOADER_KEEP), oldest first, skipping any
        build a live process holds, and drop ``.tmp-`` folders of dead processes."""
        keep = keep_count()
        entries = []
        for entry in self.builds_folder(name).iterdir():
            if entry.name.startswith(TMP_PREFIX):
                if time.time() - entry.stat().st_mtime > STALE_TMP_SECONDS:
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            with contextlib.suppress(OSError):
                entries.append((entry.stat().st_mtime, entry))
        entries.sort(reverse=True)
        for _mtime, entry in entries[keep:]:
            if entry.name == keep_key:
                continue
            with contextlib.suppress(OSError):
                fd = os.open(entry / "manifest.json", os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # in use by a live process
                finally:
                    os.close(fd)
                shutil.rmtree(entry, ignore_errors=True)
