"""Bundles: the builds some ops need, in one file that is verified as it installs as a
cache layer (``python -m jit_loader pack`` / ``unpack``).

The archive is a gzip'd tar laid out as a cache::

    bundle.json                      first: what the bundle holds (below)
    <op>/builds/<key>/<op>.so        each build as the cache keeps it
    <op>/builds/<key>/manifest.json  (with what its key names: jit_tools/key.py, describe)
    <op>/builds/<key>/build.log

``bundle.json`` names, per build, the op, its key, its ABI, what the key names (the
configuration: torch or stable target version, CUDA, compilers, arch list, flags; and
each source and header with its sha256) and the sha256 and size of each of its files.
``unpack`` reads only the members ``bundle.json`` lists, by names it checked (no link, no
absolute path, no ``..``), hashes each as it is written into a staging folder of its own,
and installs a build (one rename each) only when every file of the bundle matched: a
tampered or truncated bundle installs nothing and is refused in one line naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import time
import zlib
from pathlib import Path

import torch

from jit_tools import key as keys, layers, locks, sources, store as stores
from jit_tools.errors import JitLoaderError

FORMAT = 1
INDEX = "bundle.json"
MEMBER = re.compile(r"(?P<op>[A-Za-z_][A-Za-z0-9_]*)/builds/(?P<key>[0-9a-f]{20})/(?P<file>[A-Za-z0-9_.+-]+)")
BUILD_FILES = ("manifest.json", "build.log")  # beside the library


class BundleError(JitLoaderError):
    """A bundle that cannot be made or is refused (one line naming the file)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---- pack ------------------------------------------------------------------------------


def current_builds(names: list[str], options: dict) -> tuple[list[tuple[str, str, Path]], list[str]]:
    """(op, key, op folder) of the build a new process of each op would load now (with ``options``)
    where a cache layer holds it, and a note for each op that has none."""
    from jit_tools import pipeline

    found, notes = [], []
    for name in names:
        op_dir = source_folder(name)
        if op_dir is None:
            notes.append(f"{name}: its source folder is gone (or it was built from a source list)")
            continue
        try:
            key = pipeline.op_key(op_dir, **options)[0]
        except JitLoaderError as e:
            notes.append(f"{name}: {str(e).splitlines()[0]}")
            continue
        if layers.find_build(name, key)[1] is None:
            notes.append(f"{name}: no current build in the cache (pack it by name to build it)")
        else:
            found.append((name, key, op_dir))
    return found, notes


def source_folder(name: str) -> Path | None:
    """The op folder a build of ``name`` comes from: ``ops/<name>``, else the newest op
    folder the cache's builds name that still exists (not one of a source-list build)."""
    if name in sources.available_ops():
        return (sources.OPS_DIR / name).resolve()
    for _layer, manifest in layers.held(name):
        folder = manifest.get("op_dir")
        if folder and not manifest.get("source_list") and Path(folder).is_dir() \
                and Path(folder).name == name:
            return Path(folder)
    return None


def cached_op_names() -> list[str]:
    return sorted({name for layer in stores.layers() for name in layer.op_names()})


def pack(out: Path, builds: list[tuple[str, str, Path]], name: str | None = None) -> dict:
    """Write the builds ``(op, key, op folder)`` (each from the first layer that holds it)
    into the archive ``out`` (written aside and renamed). Returns its index."""
    entries, files = [], []
    for op, key, op_dir in builds:
        layer, manifest = layers.find_build(op, key)
        if manifest is None:
            raise BundleError(f"pack: no cache layer holds build {key} of op {op!r}")
        entry = layer.entry(op, key)
        listed: dict[str, Path | bytes] = {}
        for fname in (manifest["library"], *BUILD_FILES):
            if (entry / fname).is_file():
                listed[f"{op}/builds/{key}/{fname}"] = entry / fname
        record = manifest.get("inputs") or _record(op, key, op_dir, manifest)
        if not isinstance(manifest.get("inputs"), dict) and record:
            # A build of an older loader: its manifest gains what its key names, so that a
            # node can say what differs, or use it where it lacks a compiler (layers.py).
            listed[f"{op}/builds/{key}/manifest.json"] = json.dumps(
                {**manifest, "inputs": record}, indent=1).encode()
        described = {}
        for arc, src in listed.items():
            data = src if isinstance(src, bytes) else None
            described[arc] = ({"sha256": _sha256(data), "size": len(data)} if data is not None
                              else {"sha256": file_sha256(src), "size": src.stat().st_size})
        entries.append({"op": op, "key": key, "abi": manifest.get("config", {}).get("abi", "aten"),
                        "library": manifest["library"],
                        "inputs": record,
                        "files": described})
        files += listed.items()
    index = {"format": FORMAT, "name": name or out.name.split(".")[0], "created": time.time(),
             "made_with": {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "host": locks.host()},
             "builds": entries}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{locks.private_tag()}")
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
            data = json.dumps(index, indent=1, sort_keys=True).encode()
            tar.addfile(_info(INDEX, len(data)), io.BytesIO(data))
            for arc, src in files:
                if isinstance(src, bytes):
                    tar.addfile(_info(arc, len(src)), io.BytesIO(src))
                    continue
                with open(src, "rb") as f:
                    tar.addfile(_info(arc, src.stat().st_size), f)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return index


def _record(op: str, key: str, op_dir: Path, manifest: dict) -> dict | None:
    """What build ``key`` of ``op`` names, computed from the op folder as it is now (the
    record only where it gives the build's own key)."""
    listed = [Path(p) for p in manifest.get("sources", [])] if manifest.get("source_list") else None
    try:
        now, record = keys.key_record(op, Path(op_dir), manifest.get("options") or {}, listed)
    except (JitLoaderError, OSError):
        return None
    return record if now == key else None


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, int(time.time())
    return info


# ---- unpack ----------------------------------------------------------------------------


def unpack(archive: Path, into: Path, sha256: str | None = None) -> dict:
    """Verify the bundle ``archive`` and install its builds into the cache folder ``into``
    (each a rename from a staging folder of this process; a build already there and
    valid is kept). Returns {"index", "installed", "kept"}; raises :class:`BundleError`
    naming the file at fault, having installed nothing, when any file does not match."""
    if sha256 is not None and file_sha256(archive) != sha256.lower():
        raise BundleError(f"refused {archive}: its sha256 is not {sha256}")
    into.mkdir(parents=True, exist_ok=True)
    staging = into / f"{stores.TMP_PREFIX}unpack-{locks.private_tag()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        index = _extract(archive, staging)
        return {"index": index, **_install(index, staging, into, archive)}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(archive: Path, staging: Path) -> dict:
    """Every file of the bundle written under ``staging`` and checked against its index."""
    current = INDEX
    try:
        with tarfile.open(archive, "r:gz") as tar:
            first = tar.next()
            if first is None or first.name != INDEX or not first.isfile():
                raise BundleError(f"refused {archive}: it does not start with {INDEX} (not a bundle)")
            index = json.loads(tar.extractfile(first).read())
            expected = _expected(archive, index)
            seen = set()
            while (member := tar.next()) is not None:
                current = member.name
                want = expected.get(member.name)
                if want is None or not member.isfile() or member.name in seen:
                    raise BundleError(f"refused {archive}: {member.name}: not a file its {INDEX} lists")
                seen.add(member.name)
                target = staging / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest, size = hashlib.sha256(), 0
                with tar.extractfile(member) as src, open(target, "wb") as dst:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        size += len(block)
                        dst.write(block)
                if size != want["size"] or digest.hexdigest() != want["sha256"]:
                    raise BundleError(f"refused {archive}: {member.name}: its bytes differ from the "
                                      f"sha256 in {INDEX} (tampered or damaged)")
            current = "its end"
    except BundleError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as e:
        raise BundleError(f"refused {archive}: truncated or damaged at {current} "
                          f"({type(e).__name__}: {e})") from e
    missing = sorted(set(expected) - seen)
    if missing:
        raise BundleError(f"refused {archive}: {missing[0]}: listed in {INDEX} but not in the archive "
                          "(truncated?)")
    return index


def _expected(archive: Path, index) -> dict[str, dict]:
    """The files the index lists: {member name: {"sha256", "size"}}, each name checked."""
    try:
        if index["format"] != FORMAT:
            raise BundleError(f"refused {archive}: bundle format {index['format']}, "
                              f"this loader reads {FORMAT}")
        expected = {}
        for build in index["builds"]:
            for name, want in build["files"].items():
                m = MEMBER.fullmatch(name)
                if m is None or (m["op"], m["key"]) != (build["op"], build["key"]):
                    raise BundleError(f"refused {archive}: {name}: not a path a bundle may hold")
                expected[name] = {"sha256": str(want["sha256"]), "size": int(want["size"])}
        return expected
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BundleError(f"refused {archive}: {INDEX} is not a bundle index ({e})") from e


def _install(index: dict, staging: Path, into: Path, archive: Path) -> dict:
    checked = stores.CacheStore(staging, readonly=True)
    for build in index["builds"]:
        op, key = build["op"], build["key"]
        manifest = checked.manifest(op, key, verify="full")
        if manifest is None:
            raise BundleError(f"refused {archive}: {op}/builds/{key}/manifest.json does not match "
                              "its library")
        stores.CacheStore(staging).stamp_verified(op, key, manifest["library"])
    mark = {"bundle": index["name"], "archive": str(archive.resolve()), "unpacked": time.time()}
    target = stores.CacheStore(into)
    installed, kept = [], []
    for build in index["builds"]:
        op, key = build["op"], build["key"]
        locks.write_json_atomic(checked.entry(op, key) / layers.BUNDLE_MARK, mark)
        target.builds_folder(op).mkdir(parents=True, exist_ok=True)
        fresh = locks.publish_folder(checked.entry(op, key), target.entry(op, key),
                                     lambda _e: target.manifest(op, key, verify="full") is not None)
        (installed if fresh else kept).append(f"{op}/{key}")
    return {"installed": installed, "kept": kept}
