"""``python -m jit_loader list``: every op, its cached builds, and the build a new process
would load now (its key computed by the loader's own pipeline)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from jit_tools import key as keys, layers, pipeline, sources, store as stores, usage
from jit_tools.builder import shared
from jit_tools.errors import JitLoaderError
from jit_tools.store import CacheStore
from jit_tools.tools.cli import text

NAME = "list"
HELP = "show each op, its cached builds, and which build a new process would load"
DESCRIPTION = """\
Show every op (the folders in ops/ and the ops the cache holds builds of; with OPs or PATHs
given, those only), each cached build with its size, age, state and the layer or bundle it
is in, how often the op was loaded and compiled and where its last load came from, and
mark with * the build a new process would load now (same sources, flags, arch list, torch)."""


def _ops_to_list(paths: list[str]) -> list[tuple[str, Path | None]]:
    """(name, source folder) of the ops to list: those named (an op name, an op folder, or a
    folder of op folders), else those under ops/ and those only the cache knows (built from
    elsewhere); source folder None when it is gone."""
    cached = sorted({name for layer in stores.layers() for name in layer.op_names()})
    found: list[tuple[str, Path | None]] = []
    for arg in paths:
        path = Path(arg).expanduser().resolve()
        if path.is_dir() and not sources.is_op_dir(path):
            found += [(name, path / name) for name in sources.available_ops(path)]
        elif not path.exists() and arg in cached and arg not in sources.available_ops():
            found.append((arg, _source_folder(arg)))
        else:
            op_dir = sources.resolve_op_dir(arg)
            found.append((op_dir.name, op_dir))
    if not paths:
        found = [(name, (sources.OPS_DIR / name).resolve()) for name in sources.available_ops()]
        known = {name for name, _ in found}
        found += [(name, _source_folder(name)) for name in cached if name not in known]
    return list(dict.fromkeys(found))


def _source_folder(name: str) -> Path | None:
    """The newest existing op folder that a build of ``name`` in the cache was made from."""
    for b in _all_builds(name):
        if b.get("op_dir") and Path(b["op_dir"]).is_dir():
            return Path(b["op_dir"])
    return None


def _all_builds(name: str, verify: str = "changed") -> list[dict]:
    """The builds of ``name`` in every layer, newest first, each with its ``origin``."""
    out = []
    for layer in stores.layers():
        found = pipeline.cached_builds(name, verify) if not layer.readonly else layer.builds(name, verify)
        for b in found:
            b["origin"] = layers.origin(layer, name, b["key"])
        out += found
    out.sort(key=lambda b: b.get("created", 0), reverse=True)
    return out


def _from_source_list(build: dict) -> bool:
    """Whether a build was made by ``load(name=..., sources=[...])`` (not from its folder)."""
    if "source_list" in build:
        return bool(build["source_list"])
    folder = build.get("op_dir")
    if folder is None or not Path(folder).is_dir():
        return False
    with_cuda = bool(build.get("config", {}).get("with_cuda"))
    walked = sorted(str(p) for p in sources.folder_sources(Path(folder), with_cuda, build.get("name")))
    return sorted(build.get("sources", [])) != walked or Path(folder).name != build.get("name")


def _dropin_call(name: str, op_dir: Path, manifests: list[dict]) -> dict | None:
    """The ``load(name=..., sources=[...], <options>)`` call that made the newest build of
    ``name`` from ``op_dir``, when it was made that way (torch's model: a source list, not
    an op folder); None for an op folder's builds."""
    ours = [b for b in manifests if b.get("op_dir") == str(op_dir)]
    if not ours or not _from_source_list(ours[0]):
        return None
    return {"sources": sorted(ours[0].get("sources", [])), "options": ours[0].get("options")}


def _call_text(name: str, call: dict) -> str:
    args = [f"name={name!r}", f"sources={[os.path.basename(s) for s in call['sources']]!r}"]
    args += [f"{k}={v!r}" for k, v in (call["options"] or {}).items()]
    return f"load({', '.join(args)})"


def _describe_op(name: str, op_dir: Path | None, verify: str = "changed") -> dict:
    now = time.time()
    info: dict = {"name": name, "path": str(op_dir) if op_dir else None,
                  "current_key": None, "error": None, "dropin_call": None}
    manifests = _all_builds(name, verify)
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
            "key": b["key"], "path": b["path"], "size_bytes": stores.folder_bytes(Path(b["path"])),
            "created": b.get("created"), "age_seconds": round(now - b.get("created", now)),
            "valid": b["valid"], "in_use": b["in_use"], "current": b["key"] == info["current_key"],
            "problem": None if b["valid"] else CacheStore.problem(b),
            "op_dir": b.get("op_dir"), "with_cuda": config.get("with_cuda"),
            "cuda_arch": config.get("cuda_arch"), "torch": config.get("torch"),
            "origin": b["origin"],
            "other_folder": op_dir is not None and b.get("op_dir") not in (None, str(op_dir)),
            "debug": bool(config.get("debug")),
        })
    info["builds"] = builds
    info["current_cached"] = any(b["current"] and b["valid"] for b in builds)
    work = stores.current().work_folders(name)
    info["work_folders"] = [str(w) for w in work]
    info["work_bytes"] = sum(stores.folder_bytes(w) for w in work)
    info["leftovers"] = [str(p) for p in stores.current().leftovers(name)]
    info["usage"] = usage.summary(stores.current(), name)
    return info


def run(args) -> int:
    verify = "full" if args.verify else "changed"
    ops = [_describe_op(name, op_dir, verify) for name, op_dir in _ops_to_list(args.paths)]
    store = stores.current()
    cache = store.root
    pieces = shared.pieces(cache)
    ccache_bytes = stores.folder_bytes(store.ccache_folder())
    if args.json:
        print(json.dumps({"cache": str(cache), "ops": ops, "shared": pieces,
                          "ccache": {"path": str(store.ccache_folder()), "bytes": ccache_bytes}},
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
        loads = op["usage"]
        if loads["hits"] or loads["compiles"]:
            print(f"  loads: {loads['hits']} from a cache, {loads['compiles']} compiled; the last: "
                  f"{loads['last_origin']}, {text.age(time.time() - loads['last_use'])} ago")
        for b in op["builds"]:
            mark = "*" if b["current"] else " "
            state = "ok" if b["valid"] else f"BROKEN: {b['problem']}"
            if b["in_use"]:
                state += ", in use"
            arch = f"  cuda {b['cuda_arch']}" if b["cuda_arch"] else ""
            where = "" if b["origin"] == "local cache" else f"  in {b['origin']}"
            where += f"  from {b['op_dir']}" if b["other_folder"] else ""
            arch += "  debug" if b["debug"] else ""
            print(f"  {mark} {b['key']}  {text.size(b['size_bytes']):>9}  {text.age(b['age_seconds']):>8} old"
                  f"  {state}{arch}{where}")
        if not op["builds"]:
            print("    no builds in the cache")
        if op["work_folders"]:
            print(f"    ninja work folders: {len(op['work_folders'])} ({text.size(op['work_bytes'])}, "
                  "kept for incremental rebuilds)")
        if op["leftovers"]:
            print(f"    {len(op['leftovers'])} leftover(s) of interrupted builds "
                  "(python -m jit_loader clean --broken removes them)")
    if pieces or ccache_bytes:
        print(f"\nshared by every op: {store.shared_folder()}")
        for p in pieces:
            state = "" if p["ok"] else "  (refused by the compiler; builds go without it)"
            print(f"  {Path(p['path']).name:<28} {text.size(p['bytes']):>9}  {p['kind']}, last used "
                  f"{text.age(time.time() - p['last_used'])} ago{state}")
        print(f"  ccache store                 {text.size(ccache_bytes):>9}  {store.ccache_folder()}")
        print("  (python -m jit_loader clean --shared removes them while no build runs)")
    if any(op["builds"] for op in ops):
        print("\n* marks the build a new process would load now")
    return 0


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="*", metavar="OP",
                   help="list only this op (a name, an op folder, or a folder of op folders)")
    p.add_argument("--json", action="store_true", help="print the listing as JSON, for scripts")
    p.add_argument("--verify", action="store_true",
                   help="hash every cached library against the sha256 recorded when it was built "
                        "(a load re-hashes only a library whose file changed since its last check)")

