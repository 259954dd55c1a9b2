"""``python -m jit_loader build``: ops compiled into the cache ahead of time, independent
ops in parallel processes that share the compile jobs."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
from pathlib import Path

from jit_tools import layers, pipeline, sources
from jit_tools.builder import toolchain
from jit_tools.errors import BuildError, JitLoaderError, OpNotFoundError

NAME = "build"
HELP = "compile ops into the cache ahead of time (all ops in ops/ by default)"
DESCRIPTION = """\
Compile ops into the cache so later processes load them without compiling, e.g. on a login
node before a multi-GPU job. Ops already built are skipped. Independent ops build in
parallel processes within the core count; a failed op prints its first compiler error, the
others still build, and the exit status is 1."""


def _build_options(args) -> dict:
    """The build options of ``load`` given on the command line (part of the key)."""
    return {"cuda_arch": args.cuda_arch, "extra_cflags": args.extra_cflags,
            "extra_cuda_cflags": args.extra_cuda_cflags, "extra_ldflags": args.extra_ldflags,
            "extra_include_paths": args.extra_include_paths, "debug": args.debug}


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
                  debug=bool(state.options.get("debug")),
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


def build_ops(op_dirs: list[Path], args) -> dict[Path, dict]:
    """Build what is not cached of ``op_dirs`` with the options of ``args``; one result per
    op folder (``ok``, ``key``, ``compiled``, ``error``...). Ops whose current build is in the
    cache (any layer) need no worker at all."""
    todo, results = [], {}
    for op_dir in op_dirs:
        try:
            key, config = pipeline.op_key(op_dir, **_build_options(args))
        except JitLoaderError as e:
            results[op_dir] = {"name": op_dir.name, "ok": False, "error": str(e).splitlines()[0]}
            continue
        if layers.find_build(op_dir.name, key)[1] is not None:
            results[op_dir] = {"name": op_dir.name, "ok": True, "compiled": False, "key": key,
                               "debug": config.get("debug", False),
                               "cuda_arch": config["cuda_arch"], "with_cuda": config["with_cuda"],
                               "no_cuda_reason": config["no_cuda_reason"]}
        else:
            todo.append(op_dir)
    total_jobs = args.jobs or int(toolchain.max_jobs())
    workers = 1 if args.verbose else max(1, min(len(todo), total_jobs))
    if todo:
        results.update(zip(todo, _build_all(todo, args, workers, max(1, total_jobs // workers))))
    return results


def run(args) -> int:
    if args.jobs is not None and args.jobs < 1:
        print("build: -j must be at least 1", file=sys.stderr)
        return 2
    try:
        op_dirs = [sources.resolve_op_dir(op) for op in args.ops] or [
            sources.OPS_DIR / name for name in sources.available_ops()]
    except OpNotFoundError as e:
        print(f"build: {e}", file=sys.stderr)
        return 2
    op_dirs = list(dict.fromkeys(d.resolve() for d in op_dirs))
    if not op_dirs:
        print(f"nothing to build: no ops in {sources.OPS_DIR}")
        return 0
    results = build_ops(op_dirs, args)
    failed = report(op_dirs, results)
    uses_cuda = any(r.get("cuda_arch") for r in results.values())
    if args.cuda_arch and uses_cuda and args.cuda_arch != toolchain.cuda_arch_list():
        print(f"note: a process finds these builds only with the same arch list; "
              f"run it with JIT_LOADER_CUDA_ARCH='{args.cuda_arch}' "
              f"(its default now is '{toolchain.cuda_arch_list()}')")
    if failed:
        print(f"{failed} of {len(op_dirs)} ops failed to build")
    return 1 if failed else 0


def report(op_dirs: list[Path], results: dict[Path, dict]) -> int:
    """One line per op (built, cached or FAILED with its first error); the failures."""
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
        what += ", debug build" if r.get("debug") else ""
        extra = f", CUDA arch {r['cuda_arch']}" if r.get("cuda_arch") else ""
        extra += f", CPU only: {r['no_cuda_reason']}" if r.get("no_cuda_reason") else ""
        print(f"ok      {r['name']:<{width}}  {what}, key {r['key']}{extra}")
    return failed


def add_build_options(p) -> None:
    """The build options of ``load`` as flags (``build`` and ``pack`` take them)."""
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
    p.add_argument("--debug", action="store_true", default=None,
                   help="the debug build (host -O0 -g, device line info, OPS_DEBUG checks): what "
                        "load(op, debug=True), JIT_LOADER_DEBUG=1 and sanitize load (default: "
                        "JIT_LOADER_DEBUG)")
    p.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="compile jobs in total, shared among the ops built at once "
                        "(default: MAX_JOBS, else the number of cores)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the full compiler output (builds one op at a time so it stays readable)")


def add_arguments(p) -> None:
    p.add_argument("ops", nargs="*", metavar="OP",
                   help="an op folder name under ops/ or the path of any op folder (default: all in ops/)")
    add_build_options(p)
