"""Every bundled op with CUDA kernels under compute-sanitizer: each check case of its
reference, in each dtype it declares, forward and backward, as declared and in the input
variants of ``jit_tools.tools.op_cases`` (noncontiguous, offset, empty, one), under
memcheck, racecheck and initcheck (synccheck with ``--tools all``).

    python3 -m experiments.sanitize_all                     # GPU machine, repository root
    python3 -m experiments.sanitize_all --ops sigmoid,lltm --tools memcheck --json out.json

One table row per op and tool: calls, findings, seconds; then every finding with the op's
line. The last line says how many runs were clean. Exit status 1 when any finding or error.
Runs go side by side (``--jobs``, default 4): each is its own process under the tool.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time

import jit_loader
from experiments import benchutil
from jit_tools import sources
from jit_tools.tools import nvtools, op_cases, sanitize


def cuda_ops() -> list[str]:
    return [op for op in jit_loader.available_ops() if any((sources.OPS_DIR / op).glob("*.cu"))]


def run_one(op: str, tool: str, variants, timeout: float) -> dict:
    op_dir = sources.resolve_op_dir(op)
    started = time.perf_counter()
    try:
        calls = op_cases.op_calls(op_dir, "cuda", variants)
        report = sanitize.run_calls(calls, [op_dir], tool, timeout=timeout)
    except Exception as e:  # one op's failure is a row, not the end of the run
        return {"op": op, "tool": tool, "calls": 0, "clean": False, "findings": [],
                "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                "seconds": time.perf_counter() - started}
    return {"op": op, "tool": tool, "calls": len(calls), "clean": report.clean,
            "findings": [{"headline": f.headline(), "details": f.details(), "count": f.count,
                          "excerpt": f.excerpt} for f in report.findings],
            "error": report.call_error or ("; ".join(report.run_errors) or None),
            "summary": report.summary, "seconds": report.seconds, "text": str(report)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated ops (default: every op with a .cu)")
    parser.add_argument("--tools", default="memcheck,racecheck,initcheck",
                        help="comma-separated tools, or all (default %(default)s)")
    parser.add_argument("--variants", default="all", help="comma-separated variants, or all")
    parser.add_argument("--jobs", type=int, default=4, help="runs side by side")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--json", help="write every row (and the reports' text) here")
    args = parser.parse_args(argv)
    ops = args.ops.split(",") if args.ops else cuda_ops()
    tools = list(sanitize.TOOLS) if args.tools == "all" else args.tools.split(",")
    variants = list(op_cases.VARIANTS) if args.variants == "all" else args.variants.split(",")
    for op in ops:  # build each op's debug build once, before the runs that share it
        nvtools.ensure_built(nvtools.op_options([sources.resolve_op_dir(op)], debug=True),
                             "sanitize_all", args.timeout)
    jobs = [(op, tool) for op in ops for tool in tools]
    print(f"{'op':<10} {'tool':<10} {'calls':>5} {'result':<28} {'seconds':>8}", flush=True)
    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        # Each row as its run ends: a run cut short still leaves the rows before it.
        for future in concurrent.futures.as_completed(
                [pool.submit(run_one, op, tool, variants, args.timeout) for op, tool in jobs]):
            r = future.result()
            rows.append(r)
            result = "clean" if r["clean"] else (r["error"] or f"{len(r['findings'])} findings")[:28]
            print(f"{r['op']:<10} {r['tool']:<10} {r['calls']:>5} {result:<28} {r['seconds']:>8.1f}",
                  flush=True)
    for r in rows:
        if not r["clean"]:
            print(f"\n== {r['op']} / {r['tool']}")
            print(r.get("text") or r["error"])
    if args.json:
        benchutil.save_json(args.json, [dict(r, findings=len(r["findings"]), details=r["findings"])
                                        for r in rows], "sanitize",
                            ["op", "tool", "calls", "clean", "findings", "error", "seconds"],
                            variants=variants)
    clean = sum(r["clean"] for r in rows)
    print(f"\n{clean} of {len(rows)} runs clean ({len(ops)} ops x {len(tools)} tools, variants "
          f"{','.join(variants)})")
    return 0 if clean == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
