"""Command line of jit_loader: inspect, prebuild and clean the build cache; check the setup.

    python -m jit_loader list   [PATH ...] [--json]
    python -m jit_loader build  [OP ...] [--cuda-arch LIST] [-j N] [--verbose]
    python -m jit_loader clean  [OP ...] [--older-than DAYS] [--keep N] [--broken] [--dry-run]
    python -m jit_loader doctor
    python -m jit_loader new    NAME [--cuda] [--aten [--schema SCHEMA]] [--dir PATH]

Everything here goes through the loader's own pipeline (``op_key``, ``cached_builds``,
``build_in_use``, ``remove_build``, ``load_library``) and its cache store, so the command
line sees the cache exactly as a loading process does.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from jit_tools import _torch_private, key as keys, pipeline, sources, store as stores
from jit_tools.builder import shared, toolchain
from jit_tools.errors import BuildError, CacheError, JitLoaderError, OpNotFoundError
from jit_tools.store import CacheStore
from jit_tools.tools import scaffold

LOW_DISK_BYTES = 2 * 1024**3     # below this much free space, doctor warns
MIN_GCC = (9, 0)                 # torch's headers are C++17: gcc 9 or newer
# Headers of CUDA libraries that ATen/cuda/CUDAContext.h includes (every op using the
# current stream does); minimal toolkits (nvcc and cudart only) lack them.
ATEN_CUDA_HEADERS = ("cuda_runtime_api.h", "cublas_v2.h", "cublasLt.h", "cusparse.h", "cusolverDn.h")


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def _cores() -> int:
    """Cores this process may use (respects taskset / Slurm / container CPU masks)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _size(nbytes: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError


def _age(seconds: float) -> str:
    for limit, div, unit in ((120, 1, "s"), (7200, 60, "min"), (172800, 3600, "h")):
        if seconds < limit:
            return f"{seconds / div:.0f} {unit}"
    return f"{seconds / 86400:.0f} days"


def _folder_size(path: Path) -> int:
    return stores.folder_bytes(path)


def _op_caches() -> list[str]:
    """Names of the ops that have a folder of builds in the cache."""
    return stores.current().op_names()


def _resolve(name_or_path: str) -> Path:
    """An op folder from a name under ops/ or a path, exactly as ``load`` resolves it."""
    return sources.resolve_op_dir(name_or_path)


def _broken_reason(build: dict) -> str:
    """Why ``cached_builds`` marked a build invalid, in words."""
    return CacheStore.problem(build)


def _leftovers(name: str) -> list[Path]:
    """Half-written build folders (``builds/.tmp-*``) that an interrupted build left."""
    return stores.current().leftovers(name)


# --------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------


def _ops_to_list(paths: list[str]) -> list[tuple[str, Path | None]]:
    """(name, source folder) of the ops under ops/, of PATHs, and of ops that only
    the cache knows (built from elsewhere); source folder None when it is gone."""
    found: list[tuple[str, Path | None]] = [
        (name, (sources.OPS_DIR / name).resolve()) for name in sources.available_ops()]
    for text in paths:
        path = Path(text).expanduser().resolve()
        if path.is_dir() and not sources.is_op_dir(path):
            found += [(name, path / name) for name in sources.available_ops(path)]
        else:
            op_dir = _resolve(text)
            found.append((op_dir.name, op_dir))
    known = {name for name, _ in found}
    for name in _op_caches():
        if name in known:
            continue
        origins = {b.get("op_dir") for b in pipeline.cached_builds(name)} - {None}
        existing = [Path(s) for s in sorted(origins) if Path(s).is_dir()]
        found.append((name, existing[0] if existing else None))
    unique = []
    for item in found:
        if item not in unique:
            unique.append(item)
    return unique


def _dropin_call(name: str, op_dir: Path, manifests: list[dict]) -> dict | None:
    """The ``load(name=..., sources=[...], <options>)`` call that made the newest build of
    ``name``, when it was made that way (torch's model: a source list, not an op folder);
    None for an op folder's builds."""
    if not manifests:
        return None
    newest = manifests[0]
    listed = sorted(newest.get("sources", []))
    walked = sorted(str(p) for p in sources.walk_sources(op_dir)
                    if newest.get("config", {}).get("with_cuda") or not sources.is_cuda_source(p, name))
    if name == op_dir.name and listed == walked:
        return None
    return {"sources": listed, "options": newest.get("options")}


def _call_text(name: str, call: dict) -> str:
    args = [f"name={name!r}", f"sources={[os.path.basename(s) for s in call['sources']]!r}"]
    args += [f"{k}={v!r}" for k, v in (call["options"] or {}).items()]
    return f"load({', '.join(args)})"


def _describe_op(name: str, op_dir: Path | None, verify: str = "changed") -> dict:
    now = time.time()
    info: dict = {"name": name, "path": str(op_dir) if op_dir else None,
                  "current_key": None, "error": None, "dropin_call": None}
    manifests = pipeline.cached_builds(name, verify)
    call = _dropin_call(name, op_dir, manifests) if op_dir is not None else None
    if op_dir is None:
        info["error"] = "its source folder no longer exists"
    elif call is not None and call["options"] is None:
        info.update(dropin_call=call, error="built by load(name=..., sources=[...]) with options "
                                            "this cache did not record; run that call again")
    else:
        try:
            if call is None:
                key, config = pipeline.op_key(op_dir)
            else:  # the key the same load(name=..., sources=[...]) call computes now
                info["dropin_call"] = call
                key, config, _, _ = keys.compute_key(name, op_dir, call["options"],
                                                     [Path(s) for s in call["sources"]])
            info.update(current_key=key, with_cuda=config["with_cuda"],
                        cuda_arch=config["cuda_arch"], no_cuda_reason=config["no_cuda_reason"])
        except (JitLoaderError, OSError) as e:
            info["error"] = str(e).splitlines()[0]
    builds = []
    for b in manifests:
        config = b.get("config", {})
        builds.append({
            "key": b["key"], "path": b["path"], "size_bytes": _folder_size(Path(b["path"])),
            "created": b.get("created"), "age_seconds": round(now - b.get("created", now)),
            "valid": b["valid"], "in_use": b["in_use"], "current": b["key"] == info["current_key"],
            "problem": None if b["valid"] else _broken_reason(b),
            "op_dir": b.get("op_dir"), "with_cuda": config.get("with_cuda"),
            "cuda_arch": config.get("cuda_arch"), "torch": config.get("torch"),
        })
    info["builds"] = builds
    info["current_cached"] = any(b["current"] and b["valid"] for b in builds)
    work = stores.current().work_folders(name)
    info["work_folders"] = [str(w) for w in work]
    info["work_bytes"] = sum(_folder_size(w) for w in work)
    info["leftovers"] = [str(p) for p in _leftovers(name)]
    return info


def cmd_list(args) -> int:
    verify = "full" if args.verify else "changed"
    ops = [_describe_op(name, op_dir, verify) for name, op_dir in _ops_to_list(args.paths)]
    cache = stores.cache_dir()
    pieces = shared.pieces(cache)
    ccache_bytes = stores.folder_bytes(shared.ccache_store(cache))
    if args.json:
        print(json.dumps({"cache": str(cache), "ops": ops, "shared": pieces,
                          "ccache": {"path": str(shared.ccache_store(cache)), "bytes": ccache_bytes}},
                         indent=2))
        return 0
    source = "JIT_LOADER_CACHE" if os.environ.get("JIT_LOADER_CACHE") else "set JIT_LOADER_CACHE to move it"
    print(f"cache: {cache}  ({source})")
    if not ops:
        print(f"no ops found in {sources.OPS_DIR} and no builds in the cache")
    for op in ops:
        print()
        print(f"{op['name']}  {op['path'] or '(source folder gone)'}")
        call = op["dropin_call"]
        if op["error"]:
            print(f"  cannot compute the current key: {op['error']}")
        elif call is not None:
            state = ("loads build {} (cached, no compile)" if op["current_cached"] else
                     "compiles build {} (not cached; run that call once to prebuild it: "
                     "python -m jit_loader build takes op folders, not source lists)")
            print(f"  a new process calling jit_loader.{_call_text(op['name'], call)} "
                  + state.format(op["current_key"]))
        elif op["current_cached"]:
            print(f"  a new process loads build {op['current_key']} (cached, no compile)")
        else:
            in_ops = Path(op["path"]).parent == sources.OPS_DIR.resolve()
            print(f"  a new process compiles build {op['current_key']} (not cached; prebuild it with: "
                  f"python -m jit_loader build {op['name'] if in_ops else op['path']})")
        if op.get("no_cuda_reason"):
            print(f"  CPU only: {op['no_cuda_reason']}")
        for b in op["builds"]:
            mark = "*" if b["current"] else " "
            state = "ok" if b["valid"] else f"BROKEN: {b['problem']}"
            if b["in_use"]:
                state += ", in use"
            arch = f"  cuda {b['cuda_arch']}" if b["cuda_arch"] else ""
            print(f"  {mark} {b['key']}  {_size(b['size_bytes']):>9}  {_age(b['age_seconds']):>8} old"
                  f"  {state}{arch}")
        if not op["builds"]:
            print("    no builds in the cache")
        if op["work_folders"]:
            print(f"    ninja work folders: {len(op['work_folders'])} ({_size(op['work_bytes'])}, "
                  "kept for incremental rebuilds)")
        if op["leftovers"]:
            print(f"    {len(op['leftovers'])} leftover(s) of interrupted builds "
                  "(python -m jit_loader clean --broken removes them)")
    if pieces or ccache_bytes:
        print(f"\nshared by every op: {shared.shared_dir(cache)}")
        for p in pieces:
            state = "" if p["ok"] else "  (refused by the compiler; builds go without it)"
            print(f"  {Path(p['path']).name:<28} {_size(p['bytes']):>9}  {p['kind']}, last used "
                  f"{_age(time.time() - p['last_used'])} ago{state}")
        print(f"  ccache store                 {_size(ccache_bytes):>9}  {shared.ccache_store(cache)}")
        print("  (python -m jit_loader clean --shared removes them while no build runs)")
    if any(op["builds"] for op in ops):
        print("\n* marks the build a new process would load now")
    return 0


# --------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------


def _build_options(args) -> dict:
    """The build options of ``load`` given on the command line (part of the key)."""
    return {"cuda_arch": args.cuda_arch, "extra_cflags": args.extra_cflags,
            "extra_cuda_cflags": args.extra_cuda_cflags, "extra_ldflags": args.extra_ldflags,
            "extra_include_paths": args.extra_include_paths}


def _build_one(op_dir: str, options: dict, verbose: bool, max_jobs: int) -> dict:
    """Build (or fetch) one op by loading its library; runs in a worker process."""
    os.environ["MAX_JOBS"] = str(max_jobs)  # ninja -j of this worker
    result = {"op_dir": op_dir, "name": Path(op_dir).name, "ok": False}
    try:
        state = pipeline.load_library(op_dir, verbose, **options)
    except BuildError as e:
        result.update(error=str(e).splitlines()[0], log=e.log_path)
        return result
    except Exception as e:  # report every failure; one op must not stop the others
        message = str(e).splitlines()[0] if str(e) else ""
        result.update(error=f"{type(e).__name__}: {message}")
        return result
    info = state.info
    result.update(ok=True, key=info.key, compiled=info.compiled, seconds=info.seconds,
                  log=info.log_path, cuda_arch=info.cuda_arch, no_cuda_reason=info.no_cuda_reason)
    return result


def _start_build_worker(rows, lock) -> None:
    """Runs once in each build process: share tqdm's terminal lock with the other
    workers and give this worker's progress bars a terminal row of their own."""
    import tqdm.auto

    tqdm.auto.tqdm.set_lock(lock)
    row = rows.get()
    base = tqdm.auto.tqdm

    class RowBar(base):
        def __init__(self, *a, **kw):
            kw.setdefault("position", row)
            super().__init__(*a, **kw)

    tqdm.auto.tqdm = RowBar  # jit_tools.builder.ninja.run_ninja looks it up at each build


def _build_all(op_dirs: list[Path], args, workers: int, max_jobs: int) -> list[dict]:
    jobs = [(str(d), _build_options(args), args.verbose, max_jobs) for d in op_dirs]
    if workers == 1:
        return [_build_one(*job) for job in jobs]
    ctx = multiprocessing.get_context("spawn")  # torch is imported: never fork
    rows = ctx.Queue()
    for row in range(workers):
        rows.put(row)
    results = {}
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=_start_build_worker,
            initargs=(rows, ctx.RLock())) as pool:
        futures = {pool.submit(_build_one, *job): job[0] for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            op_dir = futures[future]
            try:
                results[op_dir] = future.result()
            except Exception as e:  # the worker died (segfault, OOM kill)
                results[op_dir] = {"op_dir": op_dir, "name": Path(op_dir).name, "ok": False,
                                   "error": f"the build process died: {e}"}
    return [results[str(d)] for d in op_dirs]


def cmd_build(args) -> int:
    if args.jobs is not None and args.jobs < 1:
        print("build: -j must be at least 1", file=sys.stderr)
        return 2
    try:
        op_dirs = [_resolve(op) for op in args.ops] or [
            sources.OPS_DIR / name for name in sources.available_ops()]
    except OpNotFoundError as e:
        print(f"build: {e}", file=sys.stderr)
        return 2
    op_dirs = list(dict.fromkeys(d.resolve() for d in op_dirs))
    if not op_dirs:
        print(f"nothing to build: no ops in {sources.OPS_DIR}")
        return 0

    # Ops whose current build is already in the cache need no worker at all.
    todo, results, uses_cuda = [], {}, False
    for op_dir in op_dirs:
        try:
            key, config = pipeline.op_key(op_dir, **_build_options(args))
        except JitLoaderError as e:
            results[op_dir] = {"name": op_dir.name, "ok": False, "error": str(e).splitlines()[0]}
            continue
        uses_cuda |= config["with_cuda"]
        cached = any(b["key"] == key and b["valid"] for b in pipeline.cached_builds(op_dir.name))
        if cached:
            results[op_dir] = {"name": op_dir.name, "ok": True, "compiled": False, "key": key,
                               "cuda_arch": config["cuda_arch"],
                               "no_cuda_reason": config["no_cuda_reason"]}
        else:
            todo.append(op_dir)

    total_jobs = args.jobs or int(os.environ.get("MAX_JOBS") or _cores())
    workers = 1 if args.verbose else max(1, min(len(todo), total_jobs))
    max_jobs = max(1, total_jobs // workers)
    if todo:
        built = _build_all(todo, args, workers, max_jobs)
        results.update(zip(todo, built))

    failed = 0
    width = max(len(d.name) for d in op_dirs)
    for op_dir in op_dirs:
        r = results[op_dir]
        if not r["ok"]:
            failed += 1
            print(f"FAILED  {r['name']:<{width}}  {r['error']}")
            if r.get("log"):
                print(f"        {'':<{width}}  full log: {r['log']}")
            continue
        what = f"built in {r['seconds']:.1f} s" if r["compiled"] else "up to date (cached)"
        extra = f", CUDA arch {r['cuda_arch']}" if r.get("cuda_arch") else ""
        extra += f", CPU only: {r['no_cuda_reason']}" if r.get("no_cuda_reason") else ""
        print(f"ok      {r['name']:<{width}}  {what}, key {r['key']}{extra}")
    if args.cuda_arch and uses_cuda and args.cuda_arch != toolchain.cuda_arch_list():
        print(f"note: a process finds these builds only with the same arch list; "
              f"run it with JIT_LOADER_CUDA_ARCH='{args.cuda_arch}' "
              f"(its default now is '{toolchain.cuda_arch_list()}')")
    if failed:
        print(f"{failed} of {len(op_dirs)} ops failed to build")
    return 1 if failed else 0


# --------------------------------------------------------------------------------------
# clean
# --------------------------------------------------------------------------------------


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
        op_dir = _resolve(name)
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
        size = _folder_size(entry)
        label = f"{name}/{entry.name}"
        age = _age(time.time() - b.get("created", time.time()))
        why = "" if b["valid"] else f" (broken: {_broken_reason(b)})"
        if pipeline.build_in_use(entry):
            print(f"skipped       {label}  in use by a running process; clean again once it exits")
            totals["skipped"] += 1
            remaining += 1
        elif args.dry_run or pipeline.remove_build(entry):
            print(f"{verb:<13} {label}  {_size(size)}, {age} old{why}")
            totals["removed"] += 1
            totals["bytes"] += size
        else:
            print(f"skipped       {label}  could not be removed (taken into use meanwhile?)")
            totals["skipped"] += 1
            remaining += 1

    # Work folders go when the op is cleaned entirely; .tmp- leftovers always. The caller
    # holds the op's build lock, so no build writes into them now.
    extra = _leftovers(name)
    if remaining == 0 and not args.broken:
        extra += store.work_folders(name)
    for path in extra:
        size = _folder_size(path)
        kind = "left by an interrupted build" if path.name.startswith(".tmp-") else "ninja work folder"
        if not args.dry_run:
            shutil.rmtree(path, ignore_errors=True)
        print(f"{verb:<13} {name}/{path.relative_to(op_cache)}  {_size(size)}, {kind}")
        totals["bytes"] += size


def _shrink(args, totals: dict) -> None:
    """--max-size: least recently used builds go until the cache fits."""
    store = stores.current()
    try:
        bound = stores.parse_size(args.max_size)
    except CacheError as e:
        raise SystemExit(f"clean: --max-size: {e}") from None
    before = store.bytes_used()
    if args.dry_run:
        print(f"dry run: the cache holds {_size(before)}; --max-size {args.max_size} would remove "
              "least recently used builds until it fits")
        return
    for entry in store.shrink(bound):
        print(f"{'removed':<13} {entry.parent.parent.name}/{entry.name}  least recently used")
        totals["removed"] += 1
    totals["bytes"] += max(0, before - store.bytes_used())
    if store.bytes_used() > bound:
        print(f"the cache still holds {_size(store.bytes_used())}: the rest is in use, being built, "
              "or shared pieces and ccache's store (python -m jit_loader clean --shared)")


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
        if shared.owned(store.root):
            for piece in shared.pieces(store.root):
                path = Path(piece["path"])
                if args.dry_run or shared.remove_piece(store.root, path):
                    print(f"{verb:<13} _shared/{path.name}  {_size(piece['bytes'])}, {piece['kind']} "
                          f"piece, last used {_age(time.time() - piece['last_used'])} ago")
                    totals["bytes"] += piece["bytes"]
                else:
                    print(f"skipped       _shared/{path.name}  being built now")
        ccache_dir = shared.ccache_store(store.root)
        if ccache_dir.is_dir():
            size = stores.folder_bytes(ccache_dir)
            if not args.dry_run:
                shutil.rmtree(ccache_dir, ignore_errors=True)
            print(f"{verb:<13} _ccache  {_size(size)}, ccache's store of compiled objects")
            totals["bytes"] += size


def cmd_clean(args) -> int:
    if args.keep is not None and args.keep < 0 or args.older_than is not None and args.older_than < 0:
        print("clean: --keep and --older-than must not be negative", file=sys.stderr)
        return 2
    if args.broken and (args.keep is not None or args.older_than is not None):
        print("clean: --broken keeps every good build; do not combine it with --keep or "
              "--older-than", file=sys.stderr)
        return 2
    cached = _op_caches()
    names = []
    for op in args.ops:
        if op in cached:
            names.append(op)
            continue
        try:
            name = _resolve(op).name
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
    freed = _size(totals["bytes"])
    if args.dry_run:
        print(f"dry run: would free {freed}; nothing was removed")
    else:
        print(f"removed {totals['removed']} build(s), freed {freed}", end="")
        if totals["skipped"]:
            print(f"; skipped {totals['skipped']} (in use by running processes, or being built or loaded)", end="")
        print()
    return 0


# --------------------------------------------------------------------------------------
# doctor
# --------------------------------------------------------------------------------------


def _run(cmd: list[str]) -> tuple[int, str]:
    """Exit status and combined output of a quick tool query (``--version`` and alike)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, LC_ALL="C"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return proc.returncode, proc.stdout + proc.stderr


def _quiet_cpp_extension():
    """torch.utils.cpp_extension without the warning it logs on import when no GPU is visible."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        logger.setLevel(level)
    return cpp_extension


def _version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _check_torch(torch) -> list[tuple[str, str]]:
    py = sys.version.split()[0]
    if torch.version.cuda:
        return [("OK", f"torch {torch.__version__}, a CUDA {torch.version.cuda} build (Python {py})")]
    return [("WARN", f"torch {torch.__version__} is a CPU-only build (Python {py}): .cu sources are "
                     "skipped and ops run on CPU only; install a CUDA build of torch to use GPUs")]


def _check_nvcc(torch) -> tuple[list[tuple[str, str]], tuple[int, ...] | None]:
    """Verdicts on the CUDA toolkit, and nvcc's CUDA version (None when not usable)."""
    want = torch.version.cuda
    fix_to = f"a CUDA {want} toolkit" if want else "a CUDA toolkit"
    for var in ("CUDA_HOME", "CUDA_PATH"):  # the order toolchain.cuda_home() uses
        home = os.environ.get(var)
        if home:
            if not os.path.isfile(os.path.join(home, "bin", "nvcc")):
                return [("ERROR", f"{var}={home} has no bin/nvcc: point {var} at {fix_to} "
                                  f"(the folder that contains bin/nvcc) or unset {var}")], None
            how = var
            break
    home = toolchain.cuda_home()
    if not any(os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")):
        on_path = shutil.which("nvcc")
        on_path_home = on_path and os.path.dirname(os.path.dirname(os.path.realpath(on_path)))
        how = "nvcc on PATH" if home and on_path_home == home else "the default location"
    if home is None:
        if not want:
            return [("OK", "nvcc: not found, and not needed with a CPU-only torch")], None
        return [("WARN", f"nvcc not found (no CUDA_HOME, none on PATH or in /usr/local/cuda): ops with "
                         f".cu sources build for CPU only; install {fix_to} or set CUDA_HOME")], None
    nvcc = os.path.join(home, "bin", "nvcc")
    status, out = _run([nvcc, "--version"])
    m = re.search(r"release (\d+)\.(\d+)", out)
    if status != 0 or not m:
        first = out.strip().splitlines()[-1] if out.strip() else f"exit status {status}"
        return [("ERROR", f"{nvcc} (via {how}) does not run: {first}")], None
    have = (int(m.group(1)), int(m.group(2)))
    found = f"nvcc {nvcc} (via {how}): CUDA {have[0]}.{have[1]}"
    if not want:
        return [("OK", f"{found}; unused, torch is a CPU-only build")], have
    torch_v = tuple(int(p) for p in want.split(".")[:2])
    if have[0] != torch_v[0]:
        return [("ERROR", f"{found}, but torch was built with CUDA {want}: CUDA builds would fail. Fix: set "
                          f"CUDA_HOME to a CUDA {torch_v[0]}.x toolkit (e.g. /usr/local/cuda-{want}), or "
                          f"install a torch built for CUDA {have[0]}.x "
                          "(https://pytorch.org/get-started/locally/)")], have
    if have != torch_v:
        verdicts = [("WARN", f"{found}, torch was built with CUDA {want}: same major version, "
                             "usually works; a matching toolkit is the safe choice")]
    else:
        verdicts = [("OK", f"{found}, matches torch")]
    return verdicts + _check_cuda_headers(home, nvcc, how), have


def _check_cuda_headers(home: str, nvcc: str, how: str) -> list[tuple[str, str]]:
    """The toolkit folder the loader uses must hold the headers torch's ATen/cuda includes."""
    include = Path(home) / "include"
    if not (include / "cuda_runtime_api.h").is_file():
        # e.g. /usr/local/bin/nvcc is a wrapper script: its toolkit is elsewhere. nvcc knows.
        _status, out = _run([nvcc, "--dryrun", "-x", "cu", "-E", os.devnull])
        m = re.search(r"TOP=(\S+)", out)
        top = os.path.realpath(m.group(1)) if m else None
        if top and os.path.isfile(os.path.join(top, "include", "cuda_runtime_api.h")):
            fix = f"set CUDA_HOME={top} (the toolkit this nvcc belongs to)"
        else:
            fix = "set CUDA_HOME to the toolkit folder that has bin/nvcc and include/cuda_runtime_api.h"
        return [("ERROR", f"the CUDA toolkit folder derived from {how} is {home}, "
                          f"which has no include/cuda_runtime_api.h: CUDA builds fail. Fix: {fix}")]
    # The loader adds the header folders of pip's NVIDIA packages when the toolkit
    # lacks the library headers (a compiler-only toolkit), as torch's wheels do.
    extra = [Path(p) for p in toolchain.pip_cuda_includes(home)]
    missing = [h for h in ATEN_CUDA_HEADERS
               if not any((folder / h).is_file() for folder in (include, *extra))]
    if missing:
        return [("ERROR", f"the CUDA toolkit {home} lacks {', '.join(missing)}, which torch's ATen/cuda "
                          "headers include, and no pip NVIDIA package provides them: CUDA ops that use "
                          "ATen/cuda/CUDAContext.h will not compile. Fix: install the toolkit's "
                          "cuBLAS/cuSPARSE/cuSOLVER development headers")]
    providers = sorted({str(folder) for h in ATEN_CUDA_HEADERS if not (include / h).is_file()
                        for folder in extra if (folder / h).is_file()})
    if providers:
        return [("OK", f"CUDA library headers (cuBLAS, cuSPARSE...): not in {include}; builds take them "
                       f"from pip's NVIDIA packages ({', '.join(providers)})")]
    return []


def _check_compiler(torch, nvcc_version) -> list[tuple[str, str]]:
    cxx = toolchain.cxx_compiler()
    path = shutil.which(cxx)
    if path is None:
        return [("ERROR", f"C++ compiler {cxx!r} not found on PATH: install g++ (e.g. apt install g++) "
                          "or set CXX to your compiler")]
    _status, out = _run([cxx, "--version"])
    first = out.strip().splitlines()[0] if out.strip() else "?"
    is_clang = "clang" in out.lower()
    _status, dumped = _run([cxx, "-dumpfullversion", "-dumpversion"])
    version = _version(dumped) or _version(first)
    verdicts = []
    if version is None:
        verdicts.append(("WARN", f"C++ compiler {path}: cannot tell its version ({first})"))
    elif not is_clang and version < MIN_GCC:
        verdicts.append(("ERROR", f"C++ compiler {path} is gcc {'.'.join(map(str, version))}; torch's "
                                  "headers need C++17, gcc 9 or newer: install a newer g++ and set CXX"))
    else:
        verdicts.append(("OK", f"C++ compiler {path}: {first}"))

    # nvcc refuses host compilers outside its supported range (torch keeps the table).
    if torch.version.cuda and nvcc_version and version and not os.environ.get("CC"):
        cpp_extension = _quiet_cpp_extension()
        table = cpp_extension.CUDA_CLANG_VERSIONS if is_clang else cpp_extension.CUDA_GCC_VERSIONS
        bounds = table.get(f"{nvcc_version[0]}.{nvcc_version[1]}")
        if bounds and not (bounds[0] <= version < bounds[1]):
            low, high = (".".join(map(str, b)) for b in bounds)
            verdicts.append(("ERROR", f"nvcc {nvcc_version[0]}.{nvcc_version[1]} accepts host compilers "
                                      f">= {low} and < {high}, not {'.'.join(map(str, version))}: install a "
                                      "supported g++ and set CC (nvcc uses it through -ccbin)"))

    # ABI: torch's build flags do not force _GLIBCXX_USE_CXX11_ABI, so the compiler's
    # default must match torch's. Preprocessing <string> shows the default (no compile).
    want = int(_torch_private.cxx11_abi())
    try:
        proc = subprocess.run([cxx, "-x", "c++", "-E", "-dM", "-"], input="#include <string>\n",
                              capture_output=True, text=True, timeout=60)
        macros = proc.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        macros = ""
        first = str(e)
    m = re.search(r"#define _GLIBCXX_USE_CXX11_ABI (\d)", macros)
    if m and int(m.group(1)) == want:
        verdicts.append(("OK", f"C++ ABI: {cxx} defaults to _GLIBCXX_USE_CXX11_ABI={want}, as torch was "
                               "built (checked by preprocessing <string>)"))
    elif m:
        verdicts.append(("ERROR", f"C++ ABI: {cxx} defaults to _GLIBCXX_USE_CXX11_ABI={m.group(1)} but torch "
                                  f"uses {want}: ops would fail to load with undefined symbols. Use a g++ "
                                  f"with the default ABI (RHEL devtoolset compilers force 0) or pass "
                                  f"extra_cflags=['-D_GLIBCXX_USE_CXX11_ABI={want}']"))
    elif "_LIBCPP_VERSION" in macros:
        verdicts.append(("ERROR", f"C++ ABI: {cxx} uses libc++, but torch is built against libstdc++: "
                                  "use g++ (set CXX=g++)"))
    else:
        verdicts.append(("WARN", f"C++ ABI: could not preprocess <string> with {cxx}, ABI not checked"))

    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        version_tag = f"{sys.version_info.major}.{sys.version_info.minor}"
        verdicts.append(("WARN", f"Python headers missing ({include}/Python.h): ops that use pybind11 "
                                 f"(torch/extension.h) will not compile; install python{version_tag}-dev"))
    return verdicts


def _check_ninja() -> list[tuple[str, str]]:
    ninja = shutil.which("ninja")
    if ninja is None:
        beside = Path(sys.executable).parent / "ninja"
        hint = (f"; it is installed in {beside.parent}, which is not on PATH: activate that "
                "environment or add it to PATH") if beside.is_file() else ""
        return [("ERROR", f"ninja not found on PATH (builds run it): pip install ninja{hint}")]
    _status, out = _run([ninja, "--version"])
    return [("OK", f"ninja {out.strip()} ({ninja})")]


def _arch_covers(arch_list: str, capability: tuple[int, int]) -> bool | None:
    """Whether code built for ``arch_list`` runs on a GPU of ``capability``; None when
    the list has entries we cannot read (named architectures)."""
    covered = False
    for item in re.split(r"[;,\s]+", arch_list.strip()):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", item)
        if not m:
            return None
        arch = (int(m.group(1)), int(m.group(2)))
        if m.group(4) and arch <= capability:        # PTX is JIT-compiled for newer GPUs
            covered = True
        elif m.group(3) and arch == capability:      # sm_90a: exactly that GPU
            covered = True
        elif not m.group(3) and arch[0] == capability[0] and arch[1] <= capability[1]:
            covered = True                           # SASS runs on the same major, newer minor
    return covered


def _arch_source() -> str:
    for var in ("JIT_LOADER_CUDA_ARCH", "TORCH_CUDA_ARCH_LIST"):
        if os.environ.get(var) and os.environ[var] != "native":
            return f"from {var}"
    return "from the visible GPUs"


def _check_gpus(torch) -> list[tuple[str, str]]:
    if not torch.version.cuda:
        return []
    try:
        count = torch.cuda.device_count()
    except Exception as e:  # a broken driver
        return [("WARN", f"cannot query GPUs ({e}); builds use CUDA arch list {toolchain.cuda_arch_list()}")]
    arch = toolchain.cuda_arch_list()
    if count == 0:
        source = _arch_source() if _arch_source() != "from the visible GPUs" else "the default"
        why_not = toolchain.why_no_cuda()
        if why_not is not None:  # the nvcc check above gave the verdict and the fix
            return [("WARN", f"no GPU visible: CUDA kernels cannot run here, and .cu sources are "
                             f"not compiled either ({why_not})")]
        return [("WARN", f"no GPU visible: CUDA kernels cannot run here; .cu sources are still compiled, "
                         f"for CUDA arch list {arch} ({source}; set JIT_LOADER_CUDA_ARCH to choose)")]
    verdicts = []
    for i in range(count):
        cap = torch.cuda.get_device_capability(i)
        gpu = f"GPU {i}: {torch.cuda.get_device_name(i)}, compute capability {cap[0]}.{cap[1]}"
        if _arch_covers(arch, cap) is False:
            verdicts.append(("WARN", f"{gpu}: not covered by the arch list {arch} ({_arch_source()}); "
                                     f"add {cap[0]}.{cap[1]} to JIT_LOADER_CUDA_ARCH"))
        else:
            verdicts.append(("OK", f"{gpu}; builds use CUDA arch list {arch} ({_arch_source()})"))
    return verdicts


def _check_cache() -> list[tuple[str, str]]:
    root = stores.cache_dir()
    fix = "set JIT_LOADER_CACHE to a writable folder"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
            pass
    except OSError as e:
        blocker = next((p for p in (root, *root.parents) if p.exists()), root)
        detail = f"{blocker} is a file" if blocker.is_file() else e.strerror
        return [("ERROR", f"cache {root} is not writable ({detail}): {fix}")]
    free = shutil.disk_usage(root).free
    ops = _op_caches()
    builds = sum(len(pipeline.cached_builds(n)) for n in ops)
    used = sum(_folder_size(root / n) for n in ops)
    where = "from JIT_LOADER_CACHE" if os.environ.get("JIT_LOADER_CACHE") else "default location"
    pieces = shared.pieces(root)
    ccache_bytes = stores.folder_bytes(shared.ccache_store(root))
    kinds = ", ".join(f"{k} {_size(sum(p['bytes'] for p in pieces if p['kind'] == k))}"
                      for k in sorted({p["kind"] for p in pieces}))
    summary = (f"cache {root} ({where}): writable, {_size(free)} free; "
               f"{builds} build(s) of {len(ops)} op(s) use {_size(used)}; "
               f"{len(pieces)} shared piece(s) in {shared.shared_dir(root)} use "
               f"{_size(sum(p['bytes'] for p in pieces))}" + (f" ({kinds})" if kinds else "")
               + f"; ccache's store {_size(ccache_bytes)}")
    if free < LOW_DISK_BYTES:
        return [("WARN", f"{summary}. Low on space: a CUDA build needs a few hundred MB; free space, "
                         "run python -m jit_loader clean, or set JIT_LOADER_CACHE elsewhere")]
    return [("OK", summary)]


def _check_cache_entries() -> list[tuple[str, str]]:
    root = stores.cache_dir()
    if not root.is_dir():
        return []
    problems = []
    for name in _op_caches():
        for b in pipeline.cached_builds(name, verify="full"):
            if not b["valid"]:
                problems.append(f"{name}/{b['key']}: {_broken_reason(b)}")
        leftovers = _leftovers(name)
        if leftovers:
            with stores.current().build_lock_if_free(name) as builder:
                if builder is None:  # else a build is running and writing them now
                    problems += [f"{name}/builds/{p.name}: left by an interrupted build" for p in leftovers]
    if not problems:
        return [("OK", "cache entries: every build has its manifest and a complete library "
                       "whose sha256 matches the one recorded when it was built")]
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return [("WARN", f"{len(problems)} broken cache entr{'y' if len(problems) == 1 else 'ies'} ({shown}); "
                     "a load rebuilds them, and python -m jit_loader clean --broken removes them now")]


def _check_settings() -> list[tuple[str, str]]:
    verdicts, notes = [], []
    for var, default, meaning in (("JIT_LOADER_KEEP", str(stores.DEFAULT_KEEP), "builds kept per op"),
                                  ("MAX_JOBS", str(_cores()), "parallel compile jobs")):
        value = os.environ.get(var) or default
        if not value.isdigit() or int(value) < 1:
            verdicts.append(("ERROR", f"{var}={value!r} is not a positive whole number: set it to e.g. "
                                      f"{default} or unset it"))
        else:
            notes.append(f"{value} {meaning} ({var})")
    if not verdicts:
        verdicts.append(("OK", "settings: " + ", ".join(notes)))
    return verdicts


def cmd_doctor(args) -> int:
    import torch

    nvcc_verdicts, nvcc_version = _check_nvcc(torch)
    verdicts = [
        *_check_torch(torch),
        *nvcc_verdicts,
        *_check_compiler(torch, nvcc_version),
        *_check_ninja(),
        *_check_gpus(torch),
        *_check_cache(),
        *_check_cache_entries(),
        *_check_settings(),
    ]
    for verdict, message in verdicts:
        print(f"{verdict:<5} {message}", flush=True)
    return 1 if any(v == "ERROR" for v, _ in verdicts) else 0


# --------------------------------------------------------------------------------------
# new
# --------------------------------------------------------------------------------------


def cmd_new(args) -> int:
    try:
        made = scaffold.create(args.name, args.dir, cuda=args.cuda, schema=args.schema,
                              aten=args.aten)
    except scaffold.ScaffoldError as e:
        print(f"new: {e}", file=sys.stderr)
        return 2
    cwd = Path.cwd()

    def shown(path: Path) -> str:
        # "./x" rather than "x": a bare name would mean the bundled op of that name
        return os.path.join(".", path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)

    print(f"created op {args.name!r} in {shown(made.op_dir)}:")
    for path in made.files:
        print(f"  {shown(path)}")
    print(f"\nbuild it:  python -m jit_loader build {shown(made.op_dir)}")
    print(f"test it:   python -m pytest {shown(made.test_file)}")
    bundled = made.op_dir.parent == sources.OPS_DIR.resolve()  # load finds it by name
    where = args.name if bundled else shown(made.op_dir)
    print(f"use it:    op = jit_loader.load({where!r}); op.{args.name}(x)")
    return 0


# --------------------------------------------------------------------------------------
# Argument parsing
# --------------------------------------------------------------------------------------

_EPILOG = """\
examples:
  python -m jit_loader doctor                  is this machine ready to build ops?
  python -m jit_loader list                    what is built, and what would load now
  python -m jit_loader build                   prebuild every op in ops/ (e.g. on a login node)
  python -m jit_loader build lltm --cuda-arch "8.0;9.0"
  python -m jit_loader clean --older-than 30   drop builds older than a month
  python -m jit_loader new my_op --cuda        start a new op (CPU and CUDA kernels, tests)
  python -m jit_loader new rms --aten --schema "rms(Tensor x, Tensor weight, float eps) -> Tensor"

The cache lives in $JIT_LOADER_CACHE (default ~/.cache/jit_loader).
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jit_loader",
        description="Build, inspect and clean the cache of jit_loader's C++/CUDA ops, "
                    "and check that this machine can build them.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "list", help="show each op, its cached builds, and which build a new process would load",
        description="Show every op (the folders in ops/, the PATHs given, and ops the cache holds "
                    "builds of), each cached build with its size, age and state, and mark with * "
                    "the build a new process would load now (same sources, flags, arch list, torch).")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="also list this op folder, or every op in this folder of ops")
    p.add_argument("--json", action="store_true", help="print the listing as JSON, for scripts")
    p.add_argument("--verify", action="store_true",
                   help="hash every cached library against the sha256 recorded when it was built "
                        "(a load re-hashes only a library whose file changed since its last check)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "build", help="compile ops into the cache ahead of time (all ops in ops/ by default)",
        description="Compile ops into the cache so later processes load them without compiling, "
                    "e.g. on a login node before a multi-GPU job. Ops already built are skipped. "
                    "Independent ops build in parallel processes within the core count; a failed "
                    "op prints its first compiler error, the others still build, and the exit "
                    "status is 1.")
    p.add_argument("ops", nargs="*", metavar="OP",
                   help="an op folder name under ops/ or the path of any op folder (default: all in ops/)")
    p.add_argument("--cuda-arch", metavar="LIST",
                   help='CUDA architectures to compile for, e.g. "9.0" or "8.0;9.0+PTX" (default: '
                        "JIT_LOADER_CUDA_ARCH, TORCH_CUDA_ARCH_LIST, the visible GPUs, else "
                        f"{toolchain.DEFAULT_CUDA_ARCH}). A process loads these builds only when it "
                        "uses the same list, so export JIT_LOADER_CUDA_ARCH in the job too")
    for flag, dest, metavar, meaning in (
            ("--extra-cflags", "extra_cflags", "FLAG", "a C++ compiler flag, e.g. --extra-cflags=-DX=1 "
                                                      "(write = when it starts with -)"),
            ("--extra-cuda-cflags", "extra_cuda_cflags", "FLAG", "an nvcc flag"),
            ("--extra-ldflags", "extra_ldflags", "FLAG", "a linker flag"),
            ("--extra-include-path", "extra_include_paths", "DIR", "an include folder")):
        p.add_argument(flag, dest=dest, action="append", default=[], metavar=metavar,
                       help=f"{meaning}; repeatable; load's {dest}. Flags are part of the build's "
                            "key: a process loads this build only with the same flags")
    p.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="compile jobs in total, shared among the ops built at once "
                        "(default: MAX_JOBS, else the number of cores)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the full compiler output (builds one op at a time so it stays readable)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser(
        "clean", help="remove cached builds (never one a running process uses)",
        description="Remove cached builds. Without options every build of the selected ops goes, "
                    "with their Ninja work folders (the next load then compiles from scratch). "
                    "--keep and --older-than narrow this; given both, a build is removed only when "
                    "it is older AND not among the newest N. Broken builds (a truncated library, "
                    "a missing manifest) are always removed. A build a running process has loaded "
                    "is never removed: it is reported as skipped.")
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
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser(
        "doctor", help="check torch, nvcc, compiler, ninja, GPUs and the cache; exit 1 on any ERROR",
        description="Check that this machine can build and load ops: torch and its CUDA version, "
                    "nvcc against it, the C++ compiler and its ABI, ninja, the visible GPUs and "
                    "the arch list builds use, the cache folder and its free space, and broken "
                    "cache entries. One verdict per line (OK, WARN, ERROR) with the fix; the exit "
                    "status is 1 when any line is an ERROR.")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "new", help="scaffold a new op folder (schema, kernels, Python surface, reference, tests)",
        description="Create the folder of a new op, NAME, that builds and passes its tests as "
                    "generated: NAME.h (the math, torch-free, shared by CPU and CUDA), NAME.cpp "
                    "(schema and CPU kernels), NAME_host.h (argument checks), NAME.py (Python "
                    "surface: fake kernels, autograd, a function and an nn.Module), reference.py "
                    "(plain-PyTorch reference, example_inputs, check_cases, TOLERANCES), "
                    "__init__.py and test_NAME.py; with --cuda also NAME_cuda.cu (torch-free "
                    "kernels and launchers), NAME_cuda.h and NAME_cuda.cpp (the CUDA host side). "
                    "The op computes y = x * |x| as a placeholder: replace the math in NAME.h "
                    "and reference.py. The C++ host side is on the LibTorch stable ABI "
                    "(STABLE_TORCH_LIBRARY, STD_TORCH_CHECK; the library loads in later torch "
                    "releases); with --aten it is on ATen (the full API, C++ autograd). With "
                    "--aten --schema every file follows the schema's arguments "
                    "(checks, kernels, fake kernels, one gradient per tensor, reference, tests). "
                    "Its dispatcher namespace is NAME (torch.ops.NAME.forward "
                    "and .backward). When --dir is a folder named ops beside a tests folder (this "
                    "repository's layout) the test file goes to tests/test_NAME.py; elsewhere it "
                    "goes into the op folder with a conftest.py registering the cuda marker. "
                    "Existing files are never overwritten.",
        epilog="example: python -m jit_loader new my_op --cuda && python -m pytest tests/test_my_op.py")
    p.add_argument("name", metavar="NAME",
                   help="the op's name: a folder, a Python module, a C++ namespace and the "
                        "torch.ops namespace at once (letters, digits, underscores)")
    p.add_argument("--cuda", action="store_true",
                   help="also generate the CUDA kernel (NAME_cuda.cu) and its host side (NAME_cuda.cpp); "
                        "they are compiled only where nvcc and a CUDA build of torch are present")
    p.add_argument("--aten", action="store_true",
                   help="write the C++ host side against ATen (ATen/ATen.h, TORCH_LIBRARY) rather "
                        "than the stable ABI: the full API and C++ autograd, a slower rebuild, a "
                        "library that loads only in the torch it was built with")
    p.add_argument("--schema", metavar="SCHEMA",
                   help='with --aten: the op\'s arguments, e.g. "NAME(Tensor x, Tensor weight, '
                        'float eps=1e-06) -> Tensor" (Tensor, float, int, bool; one Tensor result): every file follows it, '
                        "with one gradient per tensor argument and an elementwise placeholder math "
                        "to replace (default: NAME(Tensor x) -> Tensor, y = x * |x|)")
    p.add_argument("--dir", metavar="PATH",
                   help="create the op folder in PATH (created if missing; default: ./ops when the "
                        "current folder has one, else the current folder). The op loads from any "
                        "folder: ops/common's headers are always on the include path")
    p.set_defaults(func=cmd_new)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except JitLoaderError as e:
        print(f"{args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
