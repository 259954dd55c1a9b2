"""Where a test run's CPU goes: a sampling profile of the host's processes, and the compile
seconds that Ninja logged per unit.

    python -m experiments.suite_profile sample --out prof.json &   # until SIGTERM/SIGINT
    python -m experiments.suite_profile ninja /tmp/pytest-of-root /tmp/jit_loader_cache

``sample`` reads /proc every ``--interval`` seconds and counts the processes that are
running (state R) by what they are: the compiler's passes (cc1plus, cicc, ptxas, ...) by
name, Python by the module or script it runs. A count times the interval estimates that
kind's CPU-seconds (short processes included, in proportion to their run time). It also
records how many processes ran at each sample, against the number of cores.

``ninja`` sums the build steps of every ``.ninja_log`` under the given folders by the kind
of output (``.cuda.o``, ``.o``, ``.so``, ``.pch``...) and by the op (the build folder's
name up to its key)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import time
from pathlib import Path


def _what(pid: str, comm: str) -> str:
    if not comm.startswith("python"):
        return comm
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    args = [a.decode(errors="replace") for a in argv[1:] if a]
    if "-m" in args[:-1]:
        return "python -m " + args[args.index("-m") + 1]
    if args[:1] == ["-c"]:
        return "python -c " + ("xdist worker" if "xdist" in " ".join(args) else "...")
    return "python " + Path(args[0]).name if args else comm


def sample(out: Path, interval: float) -> None:
    running: collections.Counter[str] = collections.Counter()
    loads: list[int] = []
    names: dict[str, str] = {}
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    started = time.time()
    while not stop:
        n = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1: stat.rindex(")")], stat[stat.rindex(")") + 2:]
            if rest[0] != "R" or entry.name == str(os.getpid()):
                continue
            n += 1
            key = f"{entry.name}:{comm}"
            if key not in names:
                names[key] = _what(entry.name, comm)
            running[names[key]] += 1
        loads.append(n)
        time.sleep(interval)
    cores = os.cpu_count() or 1
    report = {
        "seconds": round(time.time() - started, 1), "interval_s": interval, "cores": cores,
        "samples": len(loads),
        "running_mean": round(sum(loads) / max(1, len(loads)), 2),
        "share_over_cores": round(sum(n > cores for n in loads) / max(1, len(loads)), 3),
        "cpu_s_by_kind": {k: round(c * interval, 1) for k, c in running.most_common(40)},
    }
    out.write_text(json.dumps(report, indent=1))


def ninja(roots: list[Path]) -> dict:
    by_output: collections.Counter[str] = collections.Counter()
    by_op: collections.Counter[str] = collections.Counter()
    steps = 0
    for root in roots:
        for log in root.rglob(".ninja_log"):
            op = log.parent.name.split("-")[0]
            for line in log.read_text(errors="replace").splitlines():
                fields = line.split("\t")
                if len(fields) < 4 or line.startswith("#"):
                    continue
                seconds = (int(fields[1]) - int(fields[0])) / 1000
                name = fields[3]
                kind = ".cuda.o" if name.endswith(".cuda.o") else Path(name).suffix or name
                by_output[kind] += seconds
                by_op[op] += seconds
                steps += 1
    return {"steps": steps,
            "seconds_by_output": {k: round(v, 1) for k, v in by_output.most_common()},
            "seconds_by_op": {k: round(v, 1) for k, v in by_op.most_common(30)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--interval", type=float, default=0.5)
    n = sub.add_parser("ninja")
    n.add_argument("roots", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "sample":
        sample(args.out, args.interval)
    else:
        print(json.dumps(ninja(args.roots), indent=1))


if __name__ == "__main__":
    main()
