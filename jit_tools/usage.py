"""How the cache's builds are used, and what that decides: which builds go first when an
op has too many (``JIT_LOADER_KEEP``) or the cache is too big (``JIT_LOADER_MAX_SIZE``,
``clean --max-size``).

The use record is ``<writable cache>/<op>/usage.json``: for each key a process of this
cache loaded (from any layer) or built, its hits, its compiles, the time of its last use
and where it last came from. Loads alone write it, at the first activation of a build in
a process; hashing a library (``doctor``, ``list --verify``) or listing does not. So
"least recently used" means used by a load, not touched by a tool. A build with no record
(made by an older loader) counts as last used when it was built.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

from jit_tools import locks
from jit_tools.errors import CacheError
from jit_tools.log import logger
from jit_tools.store import TMP_PREFIX, STALE_TMP_SECONDS, CacheStore, folder_bytes, stale_claim

DEFAULT_KEEP = 8
USAGE = "usage.json"
MAX_RECORDS = 64  # keys remembered per op (the least recently used are forgotten)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_TOLD: set[str] = set()  # caches whose bound this process already said it cannot meet


def keep_count() -> int:
    """Builds kept per op folder (``JIT_LOADER_KEEP``)."""
    try:
        return max(1, int(os.environ.get("JIT_LOADER_KEEP", DEFAULT_KEEP)))
    except ValueError:
        logger.warning("JIT_LOADER_KEEP=%r is not a number; keeping %d builds",
                       os.environ["JIT_LOADER_KEEP"], DEFAULT_KEEP)
        return DEFAULT_KEEP


def parse_size(text: str) -> int:
    """Bytes of a size such as ``500M``, ``10G`` or ``1.5T`` (binary units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None:
        raise CacheError(f"size {text!r} is not a size such as 500M, 10G or 1.5T")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def max_size() -> int | None:
    """The cache's size bound in bytes (``JIT_LOADER_MAX_SIZE``; unset: none)."""
    text = os.environ.get("JIT_LOADER_MAX_SIZE", "").strip()
    return parse_size(text) if text else None


# ---- the record ------------------------------------------------------------------------


def records(store: CacheStore, name: str) -> dict[str, dict]:
    """key -> {"hits", "compiles", "last_use", "origin"} of op ``name``."""
    data = locks.read_json(store.op_folder(name) / USAGE)
    return data if isinstance(data, dict) else {}


def record(store: CacheStore, name: str, key: str, origin: str, compiled: bool) -> None:
    """Count one load of build ``key`` (a compile or a hit) and make it the op's most
    recently used. Never fails a load: a cache it cannot write keeps no record, and where
    the short lock is not had within a second (or locks do nothing) a concurrent count may
    be lost; the file itself is always whole (written aside and renamed)."""
    if store.readonly:
        return
    folder = store.op_folder(name)
    with contextlib.suppress(OSError, CacheError), locks.briefly(folder / "usage.lock"):
        data = records(store, name)
        entry = data.get(key) if isinstance(data.get(key), dict) else {}
        entry = {"hits": int(entry.get("hits", 0)), "compiles": int(entry.get("compiles", 0))}
        entry["compiles" if compiled else "hits"] += 1
        entry.update(last_use=time.time(), origin=origin)
        data[key] = entry
        if len(data) > MAX_RECORDS:
            for old in sorted(data, key=lambda k: data[k].get("last_use", 0))[:len(data) - MAX_RECORDS]:
                del data[old]
        locks.write_json_atomic(folder / USAGE, data)


def summary(store: CacheStore, name: str) -> dict:
    """The op's hits and compiles over every build, and its last load (origin, key, time)."""
    data = records(store, name)
    last = max(data, key=lambda k: data[k].get("last_use", 0), default=None)
    return {"hits": sum(int(r.get("hits", 0)) for r in data.values()),
            "compiles": sum(int(r.get("compiles", 0)) for r in data.values()),
            "last_key": last, "last_origin": data[last].get("origin") if last else None,
            "last_use": data[last].get("last_use") if last else None}


def last_use(entry: Path, uses: dict[str, dict]) -> float:
    """When the build folder ``entry`` was last loaded (else built, else written)."""
    recorded = uses.get(entry.name, {}).get("last_use")
    if recorded is not None:
        return float(recorded)
    manifest = locks.read_json(entry / "manifest.json")
    if isinstance(manifest, dict) and "created" in manifest:
        return float(manifest["created"])
    try:
        return entry.stat().st_mtime
    except OSError:
        return 0.0


def _entries(store: CacheStore, name: str) -> list[Path]:
    builds = store.builds_folder(name)
    with contextlib.suppress(OSError):
        return [e for e in builds.iterdir() if not e.name.startswith(TMP_PREFIX)]
    return []


def least_recently_used(store: CacheStore) -> list[tuple[float, str, Path]]:
    """Every build of every op as (last use, op, folder), least recently used first."""
    out = []
    for name in store.op_names():
        uses = records(store, name)
        out += [(last_use(entry, uses), name, entry) for entry in _entries(store, name)]
    out.sort()
    return out


# ---- bounds ------------------------------------------------------------------------------


def kept_anyway(store: CacheStore) -> dict[str, int]:
    """Bytes of what a size bound never removes, by kind: the shared pieces (precompiled
    headers, linker probes, the autograd and fast-entry pieces: every op's build uses them
    and they take minutes to make; ``clean --shared`` removes them), ccache's store (bounded
    by ccache itself) and the Ninja work folders (the next build of their op starts from
    them)."""
    parts = {"shared pieces": folder_bytes(store.shared_folder()) if store.owns_shared_folder() else 0,
             "ccache's store": folder_bytes(store.ccache_folder()) if store.owns_ccache_folder() else 0}
    parts["Ninja work folders"] = sum(folder_bytes(w) for name in store.op_names()
                                      for w in store.work_folders(name))
    return parts


def shrink(store: CacheStore, bound: int, building: tuple[str, str] | None = None,
           dry_run: bool = False) -> list[tuple[Path, int, float]]:
    """Remove least recently used builds until the cache holds at most ``bound`` bytes
    (with ``dry_run``, only say which would go: the same choice). Never a build a process
    holds, nor one of an op a process is building or loading; ``building`` is (op, key) of
    the build this process has just published while it holds that op's build lock (the key
    is kept, the op's other builds may go). Returns (folder, bytes, last use) of each
    build removed."""
    removed = []
    used = store.bytes_used()
    for last, name, entry in least_recently_used(store):
        if used <= bound:
            break
        if building is not None and (name, entry.name) == building:
            continue
        size = folder_bytes(entry)
        if building is not None and name == building[0]:
            gone = _goes(store, entry, dry_run)
        else:
            with store.quiet(name) as busy:
                gone = busy is None and _goes(store, entry, dry_run)
        if gone:
            used -= size
            removed.append((entry, size, last))
    return removed


def _goes(store: CacheStore, entry: Path, dry_run: bool) -> bool:
    """Remove one build (dry run: whether it would be removed now)."""
    return not CacheStore.in_use(entry) if dry_run else store.remove(entry)


def shrink_after_build(store: CacheStore, bound: int, building: tuple[str, str]) -> None:
    """``JIT_LOADER_MAX_SIZE`` after a build; says once per process and cache when what a
    bound never removes is already more than the bound."""
    for entry, _size, _last in shrink(store, bound, building):
        logger.info("removed build %s: the cache is over JIT_LOADER_MAX_SIZE", entry)
    if store.bytes_used() > bound and str(store.root) not in _TOLD:
        fixed = kept_anyway(store)
        if sum(fixed.values()) > bound:
            _TOLD.add(str(store.root))
            logger.warning("JIT_LOADER_MAX_SIZE cannot be met by removing builds: %s",
                           ", ".join(f"{kind} {size / 1e6:.1f} MB" for kind, size in fixed.items()))


def prune(store: CacheStore, name: str, keep_key: str) -> None:
    """Bound the builds kept per op folder (``JIT_LOADER_KEEP``): of the builds made from
    the same op folder as ``keep_key`` (a same-named op of another folder has its own
    budget), the least recently used go first, never ``keep_key`` nor a build a live
    process holds. Also drops what dead processes left: ``.tmp-`` folders an hour old and
    work folders of a process that is gone."""
    builds = store.builds_folder(name)
    with contextlib.suppress(OSError):
        for entry in builds.glob(TMP_PREFIX + "*"):
            if time.time() - entry.stat().st_mtime > STALE_TMP_SECONDS:
                locks.remove_when_free(entry, entry / "manifest.json")
    for work in store.work_folders(name):
        if stale_claim(work):
            locks.remove_when_free(work, work / "build.ninja")
    uses = records(store, name)

    def folder_of(entry: Path):
        manifest = locks.read_json(entry / "manifest.json")
        return manifest.get("op_dir") if isinstance(manifest, dict) else None

    entries = _entries(store, name)
    ours = folder_of(builds / keep_key)
    group = [e for e in entries if folder_of(e) in (ours, None)]
    group.sort(key=lambda e: last_use(e, uses), reverse=True)
    for entry in group[keep_count():]:
        if entry.name != keep_key:
            store.remove(entry)
