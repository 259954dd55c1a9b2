"""Where a test run's CPU goes: the CPU seconds of the host's processes, by what they are
and by whose work they do.

    python -m experiments.suite_profile --out prof.json &   # until SIGTERM or SIGINT

Every ``--interval`` seconds it reads each process's CPU time from /proc and adds what it
used since the last read: by kind (the compiler's passes, cc1plus, cicc, ptxas, ..., by
name; Python by the module or script it runs) and by origin (the test whose private
folder its command line or working folder names, else inductor, the main cache or the
repository's ops), and the compilers' share by origin. A process that ends between two
reads loses its last interval. It also records how many processes were running at each
read, against the number of cores."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import time
from pathlib import Path


# A test's private folder (pytest's tmp_path: <base>/pytest-N/[popen-gwN/]<test name>N/...)
_TEST_FOLDER = re.compile(r"/pytest-\d+/(?:popen-gw\d+/)?([^/\s]+?)\d*(?:/|\s|$)")


def _origin(pid: str, args: list[str]) -> str:
    """Whose work a process does: the test folder its command line or working folder
    names, else torch's inductor, the loader's main cache or the repo's own sources."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    text = " ".join(args) + " " + cwd + "/"
    if match := _TEST_FOLDER.search(text):
        return match.group(1)[:60]
    for mark, name in (("torchinductor", "inductor"), ("aotinductor", "inductor"),
                       ("jit_loader_cache", "main cache"), ("/.cache/jit_loader", "main cache"),
                       ("/ops/", "repo ops")):
        if mark in text:
            return name
    return "-"


def _what(pid: str, comm: str) -> tuple[str, str]:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm, "-"
    args = [a.decode(errors="replace") for a in argv[1:] if a]
    return _kind(comm, args), _origin(pid, args)


def _kind(comm: str, args: list[str]) -> str:
    if not comm.startswith("python"):
        return comm
    if "-m" in args[:-1]:
        return "python -m " + args[args.index("-m") + 1]
    if args[:1] == ["-c"]:
        return "python -c " + ("xdist worker" if "xdist" in " ".join(args) else "...")
    return "python " + Path(args[0]).name if args else comm


COMPILERS = {"cc1plus", "cc1", "cicc", "ptxas", "cudafe++", "nvcc", "fatbinary", "nvlink",
             "as", "ld", "ld.gold", "collect2", "ccache", "ninja"}


def sample(out: Path, interval: float) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    by_kind: collections.Counter[str] = collections.Counter()
    by_origin: collections.Counter[str] = collections.Counter()
    compile_by_origin: collections.Counter[str] = collections.Counter()
    seen: dict[str, tuple[int, str, str]] = {}  # pid:start -> (CPU ticks so far, kind, origin)
    loads: list[int] = []
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    started = time.time()
    # Processes started before this one count from its first read on (their CPU time so
    # far is not the run's); /proc's start times are clock ticks since boot.
    born = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    while not stop:
        n = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or entry.name == str(os.getpid()):
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            comm, fields = stat[stat.index("(") + 1: stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            used, key = int(fields[11]) + int(fields[12]), f"{entry.name}:{fields[19]}"
            n += fields[0] == "R"
            if key not in seen:
                seen[key] = (used if int(fields[19]) < born else 0, *_what(entry.name, comm))
            before, kind, origin = seen[key]
            seen[key] = (used, kind, origin)
            if used > before:
                by_kind[kind] += used - before
                by_origin[origin] += used - before
                if comm in COMPILERS:
                    compile_by_origin[origin] += used - before
        loads.append(n)
        time.sleep(interval)
    cores = os.cpu_count() or 1
    seconds = lambda counter, n: {k: round(c / ticks, 1) for k, c in counter.most_common(n)}  # noqa: E731
    report = {
        "seconds": round(time.time() - started, 1), "cores": cores, "samples": len(loads),
        "cpu_s": round(sum(by_kind.values()) / ticks, 1),
        "running_mean": round(sum(loads) / max(1, len(loads)), 2),
        "share_over_cores": round(sum(n > cores for n in loads) / max(1, len(loads)), 3),
        "cpu_s_by_kind": seconds(by_kind, 40),
        "cpu_s_by_origin": seconds(by_origin, 80),
        "compile_cpu_s_by_origin": seconds(compile_by_origin, 40),
    }
    out.write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args()
    sample(args.out, args.interval)


if __name__ == "__main__":
    main()
