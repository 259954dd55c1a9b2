"""The on-disk build cache. :class:`CacheStore` alone knows its layout and its locks.

Layout under the cache root (``JIT_LOADER_CACHE``, else ``$XDG_CACHE_HOME/jit_loader``)::

    <op>/build.lock            flock held while a process builds <op>; holds its pid
    <op>/use.lock              shared flock held by every load until it holds its build
    <op>/usage.json            when each build was last loaded, hits and compiles (usage.py)
    <op>/work-<tag>/           Ninja working folder, one per op folder and configuration
    <op>/work-<tag>.<host>-<pid>/   the same while one process builds in it (WorkClaim)
    <op>/builds/<key>/         a complete build: <op>.so, build.log, manifest.json
    <op>/builds/.tmp-<key>-<host>-<pid>/   a build being published (renamed to <key>)
    _inline/<name>/            sources written by load_inline (an op folder like any other)

A build is complete only once ``builds/<key>/manifest.json`` exists: it is written last,
inside the ``.tmp-`` folder, and the folder appears under its key by an atomic rename.
Every folder a process writes is its own (named for its host and pid), and every
publication is one rename, so the cache stays correct where the locks do nothing
(jit_tools/locks.py). A process using a build holds a shared flock on its manifest, so
cleaning can tell (where locks work).
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

from jit_tools import locks
from jit_tools.errors import CacheError
from jit_tools.locks import TMP_PREFIX, remove_when_free  # noqa: F401 - the store's API

VERIFIED = "verified.json"  # stat signature of the library when its hash last matched
STALE_TMP_SECONDS = 3600  # an unfinished .tmp- folder this old belongs to a dead process
# A work folder of another host's process is judged by age alone (its pid means nothing
# here): one untouched this long is a leftover, whatever became of its builder.
STALE_WORK_SECONDS = 86400


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it is gone)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


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
        """ccache's store (``CCACHE_DIR``) of this cache's builds: ``JIT_LOADER_CCACHE_DIR``
        (one store for many caches, e.g. a user's per-project caches or a test session's
        private ones: an object compiled for one is a hit for the others), else ``_ccache``."""
        env = os.environ.get("JIT_LOADER_CCACHE_DIR", "").strip()
        return Path(env) if env else self.root / "_ccache"

    def owns_ccache_folder(self) -> bool:
        """Whether ccache's store lives inside this cache (a clean of this cache cannot see
        which objects of a ``JIT_LOADER_CCACHE_DIR`` other caches' builds use)."""
        return self.ccache_folder() == self.root / "_ccache"

    def builds_folder(self, name: str) -> Path:
        return self.root / name / "builds"

    def entry(self, name: str, key: str) -> Path:
        return self.builds_folder(name) / key

    def work_folder(self, name: str, tag: str) -> Path:
        return self.root / name / f"work-{tag}"

    def work_folders(self, name: str) -> list[Path]:
        """Every Ninja work folder of the op, those claimed by a process included."""
        return sorted(self.op_folder(name).glob("work-*"))

    def claim_work(self, name: str, tag: str) -> "WorkClaim":
        """A Ninja work folder for this process alone (:class:`WorkClaim`)."""
        return WorkClaim(self.work_folder(name, tag))

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
        """What interrupted builds left: half-written build folders, and work folders
        claimed by a process that is gone (see :func:`stale_claim`)."""
        builds = self.builds_folder(name)
        tmp = sorted(builds.glob(TMP_PREFIX + "*")) if builds.is_dir() else []
        return tmp + [w for w in self.work_folders(name) if stale_claim(w)]

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
            if verify == "changed" and locks.read_json(stamp) == signature:
                return manifest
            if file_sha256(lib) != recorded:
                return None
            if not self.readonly:
                with contextlib.suppress(OSError):
                    locks.write_json_atomic(stamp, signature)
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
            locks.wait_for_lock(fd, name, quiet)
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
                locks.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield locks.holder(fd)[0]
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
            locks.flock(fd, fcntl.LOCK_SH)
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
                    locks.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
        locks.flock(fd, fcntl.LOCK_SH)
        return os.fdopen(fd, "rb")

    @staticmethod
    def in_use(entry: str | os.PathLike) -> bool:
        """True when a live process holds the build folder (a shared flock on it)."""
        try:
            fd = os.open(Path(entry) / "manifest.json", os.O_RDONLY)
        except OSError:
            return False
        try:
            locks.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    # ---- writing builds ---------------------------------------------------------------

    def publish(self, name: str, key: str, library: Path, log: Path, manifest: dict) -> dict:
        """Copy a finished build into a folder of this process's own, then give it the name
        ``builds/<key>`` by one rename. Where another process published the key first
        (possible wherever the build lock does not lock), its build stays and its manifest
        is returned. Returns the manifest of the build under the key."""
        tmp = self.builds_folder(name) / f"{TMP_PREFIX}{key}-{locks.private_tag()}"
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
            if not locks.publish_folder(
                    tmp, entry, lambda e: self.manifest(name, key, "full") is not None):
                theirs = self.manifest(name, key)
                if theirs is None:  # published and gone again: the caller looks again
                    raise locks.Vanished(f"build {entry} vanished after it was published")
                return theirs
            self.stamp_verified(name, key, library.name)  # just hashed: no re-hash on load
            return manifest
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def stamp_verified(self, name: str, key: str, library: str) -> None:
        """Record that build ``key``'s library, as it is now, hashed to its manifest's sha256
        (the caller just checked), so that a load need not hash it again."""
        with contextlib.suppress(OSError):
            st = (self.entry(name, key) / library).stat()
            locks.write_json_atomic(self.entry(name, key) / VERIFIED, [st.st_ino, st.st_size, st.st_ctime_ns])

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


def stale_claim(work: Path) -> bool:
    """True for a work folder claimed by a process that is gone: of this host and no
    longer running, or of another host and untouched for STALE_WORK_SECONDS."""
    _shared, dot, tag = work.name.partition(".")
    if not dot:
        return False
    if locks.owner_gone(tag):
        return True
    with contextlib.suppress(OSError):
        return (not tag.startswith(locks.host() + "-")
                and time.time() - work.stat().st_mtime > STALE_WORK_SECONDS)
    return False


class WorkClaim:
    """A Ninja work folder that only this process writes into, named
    ``work-<tag>.<host>-<pid>``: the op's ``work-<tag>`` taken by a rename (its objects
    make the build incremental); where another process holds that one, a folder that a
    dead process of this host claimed (as good: the content stamps say which objects are
    stale); else a new one. :meth:`release` gives it back under the shared name. So two
    processes never run Ninja in one folder, whether or not the build lock locks anything."""

    def __init__(self, shared: Path):
        self.shared = shared
        self.folder = shared.with_name(f"{shared.name}.{locks.private_tag()}")
        self._released: Path | None = None
        shutil.rmtree(self.folder, ignore_errors=True)  # a leftover of a process with our pid
        left = [w for w in shared.parent.glob(shared.name + ".*") if stale_claim(w)]
        for candidate in (shared, *left):
            try:
                os.rename(candidate, self.folder)
                return
            except OSError:
                continue
        self.folder.mkdir(parents=True)

    def release(self, keep: bool = False) -> Path:
        """Give the folder back under the shared name; returns where it is now. Where
        another process's folder took that name meanwhile, this one is removed, or with
        ``keep`` (a failed build: its log is named in the error) left for pruning."""
        if self._released is None:
            try:
                os.rename(self.folder, self.shared)
                self._released = self.shared
            except OSError:
                if not keep:
                    shutil.rmtree(self.folder, ignore_errors=True)
                self._released = self.folder
        return self._released

    def path(self, inside: str | os.PathLike) -> str:
        """A path inside the claimed folder, as it reads once released (kept)."""
        return str(inside).replace(str(self.folder), str(self.release(keep=True)), 1)
