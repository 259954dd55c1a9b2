"""How long does a fresh process take to load each op from an unpacked bundle?

The cluster recipe (README, "One cache for a cluster"): pack the ops' builds, unpack the
bundle into a folder used as a read-only layer, and load with JIT_LOADER_COMPILE=never.
For each op, fresh processes (after ``import torch, jit_loader``, outside the timing) time
``jit_loader.load(op)``: finding the build in the layer, its checks, dlopen, registration
and the op's Python surface. The target: at most 50 ms per op, no compile.

    python -m experiments.bundle_load                      # pack every op in ops/ from the cache
    python -m experiments.bundle_load --bundle B.tar.gz    # an existing bundle
    python -m experiments.bundle_load --ops gelu,lltm --repeats 5 --json $OUT/bundle_load.json

Packing builds what the cache lacks (minutes for the CUDA sources on a small machine). The
arch list follows JIT_LOADER_CUDA_ARCH as a load's does; set the same one for the pack and
the loads (the script passes its environment to both).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from jit_tools import sources

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 0.050

ONE_LOAD = """
import json, sys, time
import torch, jit_loader
started = time.perf_counter()
op = jit_loader.load(sys.argv[1])
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "compiled": op.build.compiled, "origin": op.build.origin}))
"""


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, help="a bundle to load from (default: pack one now)")
    p.add_argument("--ops", help="comma-separated ops (default: every op in ops/)")
    p.add_argument("--repeats", type=int, default=5, help="fresh processes per op (median shown)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    ops = args.ops.split(",") if args.ops else sources.available_ops()
    with tempfile.TemporaryDirectory(prefix="bundle_load_") as tmp:
        return _measure(args, ops, Path(tmp))


def _measure(args, ops: list[str], work: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bundle = args.bundle
    if bundle is None:
        bundle = work / "ops.tar.gz"
        packed = _run(["-m", "jit_loader", "pack", str(bundle), *ops], env)
        print(packed.stdout, end="")
        if packed.returncode != 0:
            print(packed.stderr, file=sys.stderr)
            return 1
    layer, local = work / "layer", work / "local"
    unpacked = _run(["-m", "jit_loader", "unpack", str(bundle), "--into", str(layer)], env)
    if unpacked.returncode != 0:
        print(unpacked.stderr, file=sys.stderr)
        return 1
    node = dict(env, JIT_LOADER_CACHE=f"{layer}{os.pathsep}{local}", JIT_LOADER_COMPILE="never")
    node.pop("JIT_LOADER_SHARED_DIR", None)
    rows = {}
    for name in ops:
        runs = []
        for _ in range(args.repeats):
            proc = _run(["-c", ONE_LOAD, name], node)
            if proc.returncode != 0:
                print(f"{name}: {proc.stderr.strip().splitlines()[-1]}", file=sys.stderr)
                return 1
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        median = statistics.median(r["seconds"] for r in runs)
        rows[name] = {"median_s": median, "min_s": min(r["seconds"] for r in runs),
                      "compiles": sum(r["compiled"] for r in runs), "origin": runs[0]["origin"],
                      "met": median <= TARGET_SECONDS and not any(r["compiled"] for r in runs)}
    print(f"\nload from an unpacked bundle, fresh process, JIT_LOADER_COMPILE=never "
          f"(median of {args.repeats}; target {TARGET_SECONDS * 1e3:.0f} ms, 0 compiles)")
    print(f"{'op':<12} {'median ms':>10} {'min ms':>8} {'compiles':>9}  met  origin")
    for name, r in rows.items():
        print(f"{name:<12} {r['median_s'] * 1e3:>10.1f} {r['min_s'] * 1e3:>8.1f} {r['compiles']:>9}  "
              f"{'yes' if r['met'] else 'NO ':<3}  {r['origin']}")
    if args.json:
        from experiments import benchutil

        benchutil.save_json(str(args.json), [{"op": name, **r} for name, r in rows.items()],
                            "bundle-load", ["op", "median_s", "min_s", "compiles", "met", "origin"],
                            repeats=args.repeats, target_s=TARGET_SECONDS)
    print(f"bundle_load: {sum(r['met'] for r in rows.values())} of {len(rows)} ops met the target")
    return 0 if all(r["met"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
