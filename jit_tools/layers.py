"""The cache layers a load searches (``JIT_LOADER_CACHE``): which one holds a build, where
a loaded build came from, whether a miss may compile (``JIT_LOADER_COMPILE``), and, where
it may not, what differs between the build wanted and the builds the layers hold.

A build's manifest records what its key names (``inputs``: :func:`jit_tools.key.describe`),
so a miss can be explained by comparing records, field by field and file by file. The
same comparison lets a machine that lacks a compiler use a build that differs from the
one it wants only in that compiler (:func:`substitute`): it could not build one itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from jit_tools import key as keys, locks, sources, store as stores
from jit_tools.builder import toolchain
from jit_tools.errors import JitLoaderError

ENV = "JIT_LOADER_COMPILE"
BUNDLE_MARK = "from_bundle.json"  # in a build folder that `unpack` installed: from which bundle
# The fields of a key that name this machine's compilers, and those that follow from
# having nvcc at all.
CXX_FIELDS = ("cxx",)
CUDA_FIELDS = ("nvcc", "with_cuda", "cuda_arch", "cuda_cflags", "torch_cuda", "no_cuda_reason")
# The order in which differences are named (the most telling first), with their words.
LABELS = {"format": "loader cache format", "support": "loader support files", "abi": "C++ ABI",
          "torch": "torch version", "torch_git": "torch build", "python": "Python ABI",
          "torch_cuda": "torch's CUDA version", "cxx11_abi": "libstdc++ ABI",
          "cxx": "C++ compiler", "nvcc": "nvcc", "with_cuda": "CUDA build",
          "cuda_arch": "CUDA arch list", "cflags": "C++ flags", "cuda_cflags": "nvcc flags",
          "ldflags": "link flags", "include_dirs": "include folders", "name": "op name",
          "no_cuda_reason": "reason CUDA was not built"}


def never_compile() -> bool:
    """``JIT_LOADER_COMPILE=never``: a load that would compile raises instead."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "never"):
        raise JitLoaderError(f"{ENV} must be auto or never, got {value!r}")
    return value == "never"


def find_build(name: str, key: str, readonly_too: bool = True
               ) -> tuple[stores.CacheStore, dict | None]:
    """The first cache layer that holds build ``key`` and its manifest; else the
    writable store and None."""
    for layer in stores.layers():
        if layer.readonly and not readonly_too:
            continue
        manifest = layer.manifest(name, key)
        if manifest is not None:
            return layer, manifest
    return stores.current(), None


def origin(store: stores.CacheStore, name: str, key: str) -> str:
    """Where a build found in ``store`` comes from, in words: ``local cache``,
    ``layer <folder>``, or ``bundle <name> (<either of those>)``."""
    where = f"layer {store.root}" if store.readonly else "local cache"
    mark = locks.read_json(store.entry(name, key) / BUNDLE_MARK)
    return f"bundle {mark.get('bundle')} ({where})" if isinstance(mark, dict) else where


def held(name: str) -> list[tuple[stores.CacheStore, dict]]:
    """Every complete build of op ``name`` in every layer, newest first."""
    out = []
    for layer in stores.layers():
        folder = layer.builds_folder(name)
        try:
            entries = [e for e in folder.iterdir() if not e.name.startswith(stores.TMP_PREFIX)]
        except OSError:
            continue
        for entry in entries:
            manifest = layer.manifest(name, entry.name, verify="size")
            if manifest is not None:
                out.append((layer, manifest))
    out.sort(key=lambda item: item[1].get("created", 0), reverse=True)
    return out


def _record_of(manifest: dict) -> dict | None:
    """What a held build's key names; for a build of an older loader, its configuration
    only (files None: not recorded)."""
    if isinstance(manifest.get("inputs"), dict):
        return manifest["inputs"]
    with_config = manifest.get("config")
    if not isinstance(with_config, dict):
        return None
    try:
        return {"config": keys.key_view(with_config, Path(manifest.get("op_dir", "."))), "files": None}
    except (KeyError, TypeError):
        return None


def _local_file(name: str, op_dir: Path) -> Path:
    """The file of this machine that a key's file name means."""
    for prefix, base in (("<repo>/", sources.OPS_DIR.parent), ("<op>/", op_dir)):
        if name.startswith(prefix):
            return base / name[len(prefix):]
    return Path(name) if os.path.isabs(name) else op_dir / name


def _free_fields(config: dict, requested_arch: str | None) -> tuple[set[str], bool, str | None]:
    """(fields a held build may differ in, whether it may compile more files, the arch list
    it must have been built for) where this machine lacks a compiler: the C++ compiler where
    none is found (an ATen key names it), and everything that follows from nvcc where torch
    is a CUDA build but no nvcc is found. The arch list is free unless one was asked for
    (``cuda_arch=``, ``JIT_LOADER_CUDA_ARCH``, ``TORCH_CUDA_ARCH_LIST``): then the held
    build must have been built for that list, which the key wanted (without CUDA) lacks."""
    free: set[str] = set()
    if "cxx" in config and config["cxx"] is None:
        free.update(CXX_FIELDS)
    more_files = bool(torch.version.cuda) and toolchain.cuda_home() is None
    arch = None
    if more_files:
        free.update(CUDA_FIELDS)
        if requested_arch or toolchain.cuda_arch_variable():
            arch = toolchain.cuda_arch_list(requested_arch)
    return free, more_files, arch


def differences(wanted: dict, theirs: dict, op_dir: Path,
                free: set[str] = frozenset(), more_files: bool = False) -> list[str]:
    """What differs between the record of the build wanted and a held build's, in words
    ("<what> (<there>, <here>)"), the most telling first. Fields in ``free`` are not
    compared; with ``more_files`` the held build may have compiled files the wanted one
    leaves out, if this machine's copies have the same content."""
    out = []
    mine, other = wanted["config"], theirs["config"]
    if more_files:  # a build with CUDA also gives its C++ units the CUDA header folders
        mine, other = ({**c, "cflags": [f for f in c.get("cflags", []) if not f.startswith("-isystem ")]}
                       for c in (mine, other))
    for field in [*LABELS, *sorted((set(mine) | set(other)) - set(LABELS))]:
        if field not in free and mine.get(field) != other.get(field):
            out.append(f"{LABELS.get(field, field)} ({_change(other.get(field), mine.get(field))})")
    if theirs["files"] is None:
        if not out:
            out.append("its sources or headers (that build records no file hashes)")
        return out
    ours, held_files = dict(wanted["files"]), dict(theirs["files"])
    for name in sorted(set(ours) | set(held_files)):
        kind = "source" if Path(name).suffix in sources.SOURCE_SUFFIXES else "header"
        if name not in held_files:
            out.append(f"{kind} {name} (not in that build)")
        elif name not in ours:
            if not more_files:
                out.append(f"{kind} {name} (compiled there, not here)")
            elif _hash_or_none(_local_file(name, op_dir)) != held_files[name]:
                out.append(f"{kind} {name} (its content)")
        elif ours[name] != held_files[name]:
            out.append(f"{kind} {name} (sha256 {held_files[name][:12]} there, {ours[name][:12]} here)")
    return out


def _change(there, here) -> str:
    """A field's two values in words; of two lists, what only one of them has."""
    if isinstance(there, list) and isinstance(here, list) and set(there) != set(here):
        only_there = " ".join(str(f) for f in there if f not in here) or "nothing"
        only_here = " ".join(str(f) for f in here if f not in there) or "nothing"
        return f"{only_there} there only, {only_here} here only"
    return f"{there!r} there, {here!r} here"


def _hash_or_none(path: Path) -> str | None:
    try:
        return sources.sha256(path)
    except OSError:
        return None


def substitute(name: str, op_dir: Path, record: dict, requested_arch: str | None
               ) -> tuple[stores.CacheStore, str, dict] | None:
    """A held build this machine may use instead of the one it wants, where the two
    differ only in a compiler this machine lacks (:func:`_free_fields`): (its layer, key,
    manifest), newest first; None where this machine has its compilers or no build fits."""
    free, more_files, arch = _free_fields(record["config"], requested_arch)
    if not free:
        return None
    for layer, manifest in held(name):
        theirs = _record_of(manifest)
        if theirs is None or theirs["files"] is None:
            continue
        if arch is not None and theirs["config"].get("cuda_arch") != arch:
            continue
        if not differences(record, theirs, op_dir, free, more_files):
            return layer, manifest["key"], manifest
    return None


def never_error(name: str, op_dir: Path, key: str, record: dict) -> JitLoaderError:
    """The one-line error of a load that would compile under ``JIT_LOADER_COMPILE=never``:
    the first difference between the build wanted and the nearest build the layers hold."""
    roots = ", ".join(str(layer.root) for layer in stores.layers())
    head = f"op {name!r}: {ENV}=never, and no cache layer holds build {key} of it"
    nearest: tuple[str, list[str]] | None = None
    for layer, manifest in held(name):
        theirs = _record_of(manifest)
        if theirs is None:
            continue
        found = differences(record, theirs, op_dir)
        if found and (nearest is None or len(found) < len(nearest[1])):
            where = f"build {manifest.get('key')} in {origin(layer, name, manifest.get('key', ''))}"
            nearest = (where, found)
    if nearest is None:
        return JitLoaderError(f"{head}, nor any other ({roots}): build it where compiling is "
                              f"allowed (python -m jit_loader build, or pack and unpack a bundle)")
    where, found = nearest
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return JitLoaderError(f"{head}; the nearest, {where}, differs in its {found[0]}{more}")
