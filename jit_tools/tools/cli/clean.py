"""``python -m jit_loader clean``: builds, work folders, shared pieces and ccache's store
removed, never while a process uses or builds them."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from pathlib import Path

from jit_tools import pipeline, sources, store as stores, usage
from jit_tools.builder import shared
from jit_tools.errors import CacheError, JitLoaderError, OpNotFoundError
from jit_tools.store import CacheStore
from jit_tools.tools.cli import text

NAME = "clean"
HELP = "remove cached builds (never one a running process uses)"
DESCRIPTION = """\
Remove cached builds. Without options every build of the selected ops goes, with their Ninja
work folders (the next load then compiles from scratch). --keep and --older-than narrow
this; given both, a build is removed only when it is older AND not among the newest N.
Broken builds (a truncated library, a missing manifest) are always removed. A build a
running process has loaded is never removed: it is reported as skipped."""


def _doomed(builds: list[dict], args, current: str | None = None) -> list[dict]:
    """The builds (newest first) that ``clean`` removes with these options. Narrowed by
    --keep or --older-than, it never removes ``current``: the build a new process of this
    op would load now."""
    if args.broken:
        return [b for b in builds if not b["valid"]]
    filtered = args.keep is not None or args.older_than is not None
    valid = [b for b in builds if b["valid"]]
    kept_newest = {b["key"] for b in valid[:args.keep]} if args.keep is not None else set()
    now = time.time()
    doomed = []
    for b in builds:
        if not b["valid"] or not filtered:
            doomed.append(b)
        elif b["key"] == current:
            continue
        elif b["key"] not in kept_newest and (
                args.older_than is None or now - b.get("created", now) > args.older_than * 86400):
            doomed.append(b)
    return doomed


def _current_key(name: str) -> str | None:
    """The key a new process of op ``name`` would load now (its folder's current sources
    and default options), or None when that cannot be told (the folder is gone)."""
    try:
        op_dir = sources.resolve_op_dir(name)
    except (OpNotFoundError, JitLoaderError):
        builds = pipeline.cached_builds(name)
        folder = next((b.get("op_dir") for b in builds if b.get("op_dir")), None)
        if folder is None or not Path(folder).is_dir():
            return None
        op_dir = Path(folder)
    try:
        return pipeline.op_key(op_dir)[0]
    except JitLoaderError:
        return None


def _clean_op(name: str, args, totals: dict) -> None:
    store = stores.current()
    # Nothing of an op is removed while a process builds or loads it: the build it is
    # making, or was just handed by another process, would be gone before it holds it.
    with store.quiet(name) as busy:
        if busy is not None:
            print(f"skipped       {name}  {busy}; clean again once it is done")
            totals["skipped"] += 1
            return
        _clean_quiet_op(store, name, args, totals)


def _clean_quiet_op(store, name: str, args, totals: dict) -> None:
    verb = "would remove" if args.dry_run else "removed"
    op_cache = store.op_folder(name)
    builds = pipeline.cached_builds(name)
    current = _current_key(name) if args.keep is not None or args.older_than is not None else None
    doomed = _doomed(builds, args, current)
    remaining = len(builds) - len(doomed)
    for b in doomed:
        entry = Path(b["path"])
        size = stores.folder_bytes(entry)
        label = f"{name}/{entry.name}"
        age = text.age(time.time() - b.get("created", time.time()))
        why = "" if b["valid"] else f" (broken: {CacheStore.problem(b)})"
        if pipeline.build_in_use(entry):
            print(f"skipped       {label}  in use by a running process; clean again once it exits")
            totals["skipped"] += 1
            remaining += 1
        elif args.dry_run or pipeline.remove_build(entry):
            print(f"{verb:<13} {label}  {text.size(size)}, {age} old{why}")
            totals["removed"] += 1
            totals["bytes"] += size
        else:
            print(f"skipped       {label}  could not be removed (taken into use meanwhile?)")
            totals["skipped"] += 1
            remaining += 1

    # Work folders go when the op is cleaned entirely; .tmp- leftovers always. The caller
    # holds the op's build lock, so no build writes into them now.
    extra = stores.current().leftovers(name)
    if remaining == 0 and not args.broken:
        extra += store.work_folders(name)
    for path in extra:
        size = stores.folder_bytes(path)
        kind = "left by an interrupted build" if path.name.startswith(".tmp-") else "ninja work folder"
        if not args.dry_run:
            shutil.rmtree(path, ignore_errors=True)
        print(f"{verb:<13} {name}/{path.relative_to(op_cache)}  {text.size(size)}, {kind}")
        totals["bytes"] += size


def _shrink(args, totals: dict) -> None:
    """--max-size: least recently used builds (by their last load: jit_tools/usage.py) go
    until the cache fits; a dry run names the same builds."""
    store = stores.current()
    try:
        bound = usage.parse_size(args.max_size)
    except CacheError as e:
        raise SystemExit(f"clean: --max-size: {e}") from None
    verb = "would remove" if args.dry_run else "removed"
    before = store.bytes_used()
    for entry, size, last in usage.shrink(store, bound, dry_run=args.dry_run):
        name = entry.parent.parent.name
        print(f"{verb:<13} {name}/{entry.name}  {text.size(size)}, least recently used "
              f"(last used {text.age(time.time() - last)} ago)")
        totals["removed"] += 1
        totals["bytes"] += size
    left = before - totals["bytes"]
    if left <= bound:
        return
    fixed = usage.kept_anyway(store)
    kept = ", ".join(f"{kind} {text.size(size)}" for kind, size in fixed.items() if size)
    print(f"the cache {'would still hold' if args.dry_run else 'still holds'} {text.size(left)}, over "
          f"{args.max_size}: --max-size removes builds only, never one in use, being built or "
          f"loaded, and none of: {kept or 'nothing else'}")
    if sum(fixed.values()) > bound:
        print(f"{args.max_size} is below what --max-size never removes ({text.size(sum(fixed.values()))}): "
              "python -m jit_loader clean --shared removes the shared pieces and ccache's store "
              "(the next build makes the pieces again)")


def _clean_shared(args, totals: dict) -> None:
    """Shared pieces (precompiled headers, link probes, the C++ autograd kernel) and ccache's store:
    removed only while no build of this cache runs (every op's build lock taken without
    waiting), so no build can be using them."""
    verb = "would remove" if args.dry_run else "removed"
    store = stores.current()
    with contextlib.ExitStack() as stack:
        for name in store.op_names():
            busy = stack.enter_context(store.build_lock_if_free(name))
            if busy is not None:
                print(f"skipped       shared pieces  process {busy} is building {name} now; "
                      "clean again once it is done")
                return
        if store.owns_shared_folder():
            for piece in shared.pieces(store.root):
                path = Path(piece["path"])
                if args.dry_run or shared.remove_piece(store.root, path):
                    print(f"{verb:<13} _shared/{path.name}  {text.size(piece['bytes'])}, {piece['kind']} "
                          f"piece, last used {text.age(time.time() - piece['last_used'])} ago")
                    totals["bytes"] += piece["bytes"]
                else:
                    print(f"skipped       _shared/{path.name}  being built now")
        ccache_dir = store.ccache_folder()
        if store.owns_ccache_folder() and ccache_dir.is_dir():
            size = stores.folder_bytes(ccache_dir)
            if not args.dry_run:
                shutil.rmtree(ccache_dir, ignore_errors=True)
            print(f"{verb:<13} _ccache  {text.size(size)}, ccache's store of compiled objects")
            totals["bytes"] += size


def run(args) -> int:
    if args.keep is not None and args.keep < 0 or args.older_than is not None and args.older_than < 0:
        print("clean: --keep and --older-than must not be negative", file=sys.stderr)
        return 2
    if args.broken and (args.keep is not None or args.older_than is not None):
        print("clean: --broken keeps every good build; do not combine it with --keep or "
              "--older-than", file=sys.stderr)
        return 2
    cached = stores.current().op_names()
    names = []
    for op in args.ops:
        if op in cached:
            names.append(op)
            continue
        try:
            name = sources.resolve_op_dir(op).name
        except OpNotFoundError:
            name = op
        if name in cached:
            names.append(name)
        else:
            print(f"no builds of {op!r} in the cache {stores.cache_dir()}")
    if not args.ops:
        names = cached
    totals = {"removed": 0, "skipped": 0, "bytes": 0}
    if args.max_size is not None:
        _shrink(args, totals)
    elif not args.shared:
        for name in dict.fromkeys(names):
            _clean_op(name, args, totals)
    everything = not args.ops and args.keep is None and args.older_than is None and not args.broken
    if args.shared or (everything and args.max_size is None):
        _clean_shared(args, totals)
    freed = text.size(totals["bytes"])
    if args.dry_run:
        print(f"dry run: would free {freed}; nothing was removed")
    else:
        print(f"removed {totals['removed']} build(s), freed {freed}", end="")
        if totals["skipped"]:
            print(f"; skipped {totals['skipped']} (in use by running processes, or being built or loaded)", end="")
        print()
    return 0


def add_arguments(p) -> None:
    p.add_argument("ops", nargs="*", metavar="OP", help="op name or folder (default: every op in the cache)")
    p.add_argument("--older-than", type=float, metavar="DAYS", help="only builds created more than DAYS ago")
    p.add_argument("--keep", type=int, metavar="N", help="keep the N newest good builds of each op")
    p.add_argument("--broken", action="store_true",
                   help="only broken builds and leftovers of interrupted builds; keep every good build")
    p.add_argument("--shared", action="store_true",
                   help="only the shared build pieces (precompiled headers, link probes, the C++ autograd "
                        "kernel) and ccache's store; plain `clean` removes them too")
    p.add_argument("--max-size", metavar="SIZE", default=None,
                   help="remove least recently used builds until the cache fits in SIZE "
                        "(e.g. 10G); JIT_LOADER_MAX_SIZE applies the same bound after every build")
    p.add_argument("-n", "--dry-run", action="store_true", help="show what would be removed, remove nothing")

