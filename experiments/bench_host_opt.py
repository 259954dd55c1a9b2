"""Do kernels launch as fast with a .cu's host half at -O1 (the loader's default) as at -O3?

nvcc's -O is the host compiler's level only, so the device code is the same bytes either
way; what could differ is the time the launchers take on the CPU. This times calls that
are nothing but that: tiny tensors, so each call is the dispatcher, the launcher and the
launch. Each build runs in its own process (one op library per process), the two
alternating for --rounds; the table gives the median per-call time of each and the ratio.

Usage: python -m experiments.bench_host_opt [--rounds 3] [--calls 20000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

from experiments.benchutil import format_table, save_json

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
    import json, sys, torch, jit_loader
    from experiments.benchutil import host_time
    flags, calls = json.loads(sys.argv[1]), int(sys.argv[2])
    jit_loader.load("sigmoid", extra_cuda_cflags=flags)
    jit_loader.load("lltm", extra_cuda_cflags=flags)
    x = torch.randn(8, device="cuda")
    g = torch.randn(8, device="cuda")
    new = lambda *shape: torch.randn(*shape, device="cuda")
    args = (new(2, 4), new(3 * 4, 4 + 4), new(3 * 4), new(2, 4), new(2, 4))
    cases = {
        "sigmoid forward": lambda: torch.ops.sigmoid.forward(x),
        "sigmoid backward": lambda: torch.ops.sigmoid.backward(g, x),
        "lltm forward": lambda: torch.ops.lltm.forward(*args),
    }
    timing = host_time(cases, "cuda", calls=calls, runs=5, warmup=200)
    print(json.dumps({name: t.best * 1e6 for name, t in timing.items()}))
"""

BUILDS = {"-O1 (default)": [], "-O3": ["-O3"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    samples: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for build, flags in BUILDS.items():
            proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), json.dumps(flags),
                                   str(args.calls)], cwd=ROOT, capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))
            if proc.returncode != 0:
                raise SystemExit(f"{build} failed:\n{proc.stderr[-3000:]}")
            for case, us in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                samples.setdefault((case, build), []).append(us)
                print(f"  round {r}: {case}, {build}: {us:.2f} us", file=sys.stderr, flush=True)
    rows = []
    for case in dict.fromkeys(c for c, _ in samples):
        o1 = statistics.median(samples[(case, "-O1 (default)")])
        o3 = statistics.median(samples[(case, "-O3")])
        rows.append({"case": case, "host -O1 us/call": round(o1, 3), "host -O3 us/call": round(o3, 3),
                     "O1 / O3": round(o1 / o3, 3), "n": args.rounds})
    print(f"# per-call time, launch-bound (best of 5 x {args.calls} calls, median over rounds)")
    print(format_table(rows))
    if args.json:
        save_json(args.json, rows)


if __name__ == "__main__":
    main()
