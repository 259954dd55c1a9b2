"""The main job: build every op, check it (jit_loader.check over the cases its reference.py
declares), print a short benchmark.

Runs on whatever device is there (CPU always, CUDA too when a GPU is visible).
Exit status is non-zero when a build or a check fails.

Usage: python -m experiments.run_all [--ops lltm,gelu] [--no-bench] [--json-dir DIR]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback

import torch

import jit_loader
from jit_tools.tools import check
from experiments import suite, suite_report
from experiments.benchutil import environment, format_table, save_json

# Benchmarks shown by the main job (the suite's quick cases of each script).
BENCHMARKS = ["experiments.bench_pointwise", "experiments.bench_lltm"]


def devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def build_and_check(names: list[str]) -> tuple[list[dict], bool]:
    rows, ok = [], True
    for name in names:
        started = time.perf_counter()
        try:
            op = jit_loader.load(name)
        except jit_loader.JitLoaderError as e:
            print(f"BUILD FAILED {name}: {str(e).splitlines()[0]}", file=sys.stderr)
            rows.append({"op": name, "device": "-", "check": "build", "ok": False})
            ok = False
            continue
        build = op.build
        how = "compiled" if build.compiled else "cached"
        print(f"{name}: {how} in {time.perf_counter() - started:.1f} s "
              f"({'CPU+CUDA' if build.with_cuda else 'CPU only'})", flush=True)
        reference = check.reference_module(op)
        if reference is None or not callable(getattr(reference, "check_cases", None)):
            print(f"CHECK FAILED {name}: {op.path / 'reference.py'} is missing or has no "
                  "check_cases(device); an op without a reference cannot be checked",
                  file=sys.stderr)
            rows.append({"op": name, "device": "-", "check": "reference.py", "ok": False})
            ok = False
            continue
        for device in devices():
            for case in reference.check_cases(device):
                try:
                    result = check.check_case(op, reference, case, device, verbose=False)
                except Exception:
                    traceback.print_exc()
                    rows.append({"op": name, "device": device, "check": f"{case}: raised", "ok": False})
                    ok = False
                    continue
                for row in result.rows:
                    rows.append({"op": name, "device": device,
                                 "check": f"{case}: {row.check} {row.dtype}".rstrip(),
                                 "max_abs_err": row.error, "tol": row.allowed, "ok": row.ok})
                ok &= bool(result)
    return rows, ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated op names (default: every op in ops/)")
    parser.add_argument("--no-bench", action="store_true", help="build and check only")
    parser.add_argument("--json-dir", help="write check and benchmark rows as JSON here")
    args = parser.parse_args(argv)

    env = environment()
    print(f"# {env['device']} | torch {env['torch']} (CUDA {env['cuda']}) | {env['date']}")
    print(f"# cache: {jit_loader.cache_dir()}")
    names = args.ops.split(",") if args.ops else jit_loader.available_ops()

    rows, ok = build_and_check(names)
    print("\n## correctness against the references")
    print(format_table(rows, ["op", "device", "check", "max_abs_err", "tol", "ok"]))
    if args.json_dir:
        save_json(os.path.join(args.json_dir, "checks.json"), rows)

    if not args.no_bench:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for module_name in BENCHMARKS:
            try:
                bench = importlib.import_module(module_name)
            except ModuleNotFoundError:
                continue
            name = module_name.split(".")[-1]
            print(f"\n## {name} on {device} (quick sizes)")
            doc = suite.run(device, "quick", bench.suite_cases(device, "quick"),
                            sections=("cases",), progress=False)
            print(suite_report.render_view(doc, name.removeprefix("bench_")))
            ok &= not doc["errors"]
            if args.json_dir:
                save_json(os.path.join(args.json_dir, f"{name}.json"), doc["records"])

    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED", file=sys.stderr if not ok else sys.stdout)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
