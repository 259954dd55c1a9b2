"""``python -m jit_loader unpack``: a bundle verified and installed as a cache layer."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jit_tools import store as stores
from jit_tools.tools import bundle

NAME = "unpack"
HELP = "verify a bundle that `pack` wrote and install its builds as a cache layer"
DESCRIPTION = """\
Check every file of the bundle against the sha256 its manifest records, then install its
builds into DIR (default: the writable cache), one rename per build. A tampered or truncated
bundle is refused in one line naming the file, and nothing is installed. Give DIR as a
read-only layer to the processes that load the ops: JIT_LOADER_CACHE=DIR:<writable cache>."""


def run(args) -> int:
    archive = Path(args.bundle).expanduser()
    if not archive.is_file():
        print(f"unpack: {archive}: no such file", file=sys.stderr)
        return 2
    into = Path(args.into).expanduser().resolve() if args.into else stores.cache_dir()
    try:
        result = bundle.unpack(archive, into, args.sha256)
    except bundle.BundleError as e:
        print(f"unpack: {e}", file=sys.stderr)
        return 1
    index = result["index"]
    for name in result["installed"]:
        print(f"installed  {name}")
    for name in result["kept"]:
        print(f"kept       {name}  (already there, intact)")
    ops = sorted({b["op"] for b in index["builds"]})
    print(f"bundle {index['name']!r}: {len(index['builds'])} build(s) of {', '.join(ops)} verified "
          f"and in {into}")
    if into != stores.cache_dir():
        print(f"load from it with JIT_LOADER_CACHE={into}{os.pathsep}<a writable cache> "
              "(add JIT_LOADER_COMPILE=never where nothing may compile)")
    return 0


def add_arguments(p) -> None:
    p.add_argument("bundle", metavar="BUNDLE.tar.gz", help="a bundle written by pack")
    p.add_argument("--into", metavar="DIR",
                   help="the cache folder to install into (default: the writable cache)")
    p.add_argument("--sha256", metavar="HEX", help="refuse the bundle unless the file has this sha256 "
                                                  "(pack prints it)")
