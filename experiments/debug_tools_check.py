"""The targets of the debugging tools, measured on this GPU machine:

* a planted out-of-bounds write (memcheck) and a planted shared-memory race (racecheck) in
  a scaffolded op, each reported at the lines where it was planted, and how long
  ``jit_loader.sanitize`` took (target: 30 s on a small op, its debug build cached);
* ``jit_loader.profile`` of sigmoid's forward at the benchmark suite's size (2^26 float32)
  and how long it took (target: 20 s), its DRAM bandwidth against the suite's GB/s for the
  same case measured in this run (target: within 15%).

    python3 -m experiments.debug_tools_check [--json out.json]

Prints one line per target, the last one a summary; exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

import jit_loader
from experiments import bench_pointwise, benchutil, planted_bugs, suite
from jit_tools.tools import nvtools, scaffold

SANITIZE_SECONDS, PROFILE_SECONDS, BANDWIDTH_TOLERANCE = 30.0, 20.0, 0.15


def planted(kind: str, tool: str, folder: Path) -> dict:
    """Scaffold an op, plant ``kind``, build its debug build, then time sanitize alone."""
    name = f"planted_{kind}"
    plan = scaffold.create(name, folder, cuda=True)
    lines = planted_bugs.plant(plan.op_dir, kind)
    op = jit_loader.load(plan.op_dir)
    nvtools.ensure_built(nvtools.op_options([plan.op_dir], debug=True), "check", 600)
    x = torch.randn(4096, device="cuda")
    started = time.perf_counter()
    report = jit_loader.sanitize(getattr(op, name), x, tool=tool, backward=False)
    seconds = time.perf_counter() - started
    cu = str(planted_bugs.kernel_file(plan.op_dir).resolve())
    found = {(f.where.file, f.where.line) for f in report.findings if f.where}
    found |= {(s.file, s.line) for f in report.findings for s in f.frames}
    at_lines = all((cu, line) in found for line in lines.values())
    print(report)
    return {"target": f"{kind} found by {tool} at lines {sorted(lines.values())}",
            "ok": at_lines and seconds <= SANITIZE_SECONDS and not report.clean,
            "seconds": seconds, "found_at_lines": at_lines,
            "findings": [f.headline() for f in report.findings]}


def sigmoid_bandwidth() -> dict:
    """profile() of sigmoid's forward against the suite's figure for the same case."""
    cases = [c for c in bench_pointwise.suite_cases("cuda", "full", dtypes=("float32",))
             if (c.op, c.pass_, c.shape) == ("sigmoid", "forward", "2^26")]
    doc = suite.run("cuda", "full", cases, sections=("cases",), progress=False)
    measured = next(r["gbps"] for r in doc["records"] if r["impl"] == "ours")
    sigmoid = jit_loader.load("sigmoid")
    x = torch.randn(2**26, device="cuda")
    started = time.perf_counter()
    report = jit_loader.profile(sigmoid.sigmoid, x, backward=False)
    seconds = time.perf_counter() - started
    print(report)
    kernel = next(k for k in report.kernels if k.op == "sigmoid")
    ratio = kernel.bandwidth_gbs / measured
    return {"target": "sigmoid forward 2^26 float32: profiled DRAM GB/s against the suite's",
            "ok": abs(ratio - 1) <= BANDWIDTH_TOLERANCE and seconds <= PROFILE_SECONDS,
            "seconds": seconds, "profiled_gbps": kernel.bandwidth_gbs, "suite_gbps": measured,
            "ratio": ratio, "peak_gbps": kernel.peak_bandwidth_gbs, "kernel": kernel.kernel,
            "device": report.device}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, tool in (("oob", "memcheck"), ("race", "racecheck")):
            rows.append(planted(kind, tool, Path(tmp)))
    rows.append(sigmoid_bandwidth())
    print()
    for r in rows:
        extra = (f", profiled {r['profiled_gbps']:.0f} GB/s vs suite {r['suite_gbps']:.0f} GB/s "
                 f"(ratio {r['ratio']:.3f}, peak {r['peak_gbps']:.0f})" if "ratio" in r else
                 f", at the planted lines: {r['found_at_lines']}")
        print(f"{'ok  ' if r['ok'] else 'MISS'} {r['target']}: {r['seconds']:.1f} s{extra}")
    if args.json:
        benchutil.save_json(args.json, rows, "debug-tools", ["target", "ok", "seconds"])
    met = sum(r["ok"] for r in rows)
    print(f"{met} of {len(rows)} targets met on {torch.cuda.get_device_name()}")
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
