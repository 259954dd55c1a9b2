"""One C++ edit of a bundled op, timed, with the compile command the loader ran for it.

    python -m experiments.cpp_edit_log sigmoid sigmoid.cpp [more units...] [--time-report]

A copy of the op in a fresh cache is built with its shared pieces first
(JIT_LOADER_SHARED_NOW=1, as bench_loader's edit rows), then each unit named gets a new
function appended and the op is reloaded: the seconds of each reload and, from the build's
log, the command that compiled the unit (which precompiled header, if any, it used), the
last Ninja steps, and with --time-report GCC's phases of that compile run again.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ninja_steps(cache: Path) -> list[str]:
    """The steps of the newest .ninja_log under ``cache``, each as "seconds target", for a
    reload's compile and link against its wall time."""
    logs = sorted(cache.rglob(".ninja_log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return []
    steps = []
    for line in logs[-1].read_text().splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 4:
            steps.append((int(parts[0]), int(parts[1]), parts[3]))
    # The last run's steps: those after the largest gap in start times restart at 0.
    last = [s for s in steps if s[0] >= 0]
    return [f"{(end - start) / 1000:.2f} s (from {start / 1000:.2f}) {target}" for start, end, target in last[-4:]]


def _time_report(cache: Path, unit: str) -> list[str]:
    """GCC's ``-ftime-report`` phases of the unit's compile command, rerun as Ninja ran it
    (without ccache) in the newest work folder under ``cache``."""
    works = sorted(cache.rglob("build.ninja"), key=lambda p: p.stat().st_mtime)
    if not works:
        return []
    obj = Path(unit).stem + ".o"
    command = subprocess.run(["ninja", "-t", "commands", obj], cwd=works[-1].parent,
                             capture_output=True, text=True).stdout.strip().splitlines()
    if not command:
        return []
    words = shlex.split(command[-1])
    words = words[1:] if words[0].endswith("ccache") else words
    words = [w for w in words if w not in ("-MMD", "-MF", obj + ".d")]
    out = words.index("-o")
    words[out + 1] = "/dev/null"
    proc = subprocess.run([*words, "-ftime-report"], cwd=works[-1].parent, capture_output=True, text=True)
    return [line for line in proc.stderr.splitlines() if "phase" in line or "TOTAL" in line]


def main(argv: list[str]) -> int:
    report = "--time-report" in argv
    argv = [a for a in argv if a != "--time-report"]
    name, units = argv[0], argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(JIT_LOADER_CACHE=str(Path(tmp) / "cache"), JIT_LOADER_SHARED_NOW="1")
        import jit_loader

        op_dir = Path(tmp) / name
        shutil.copytree(ROOT / "ops" / name, op_dir, ignore=shutil.ignore_patterns("__pycache__"))
        t = time.perf_counter()
        op = jit_loader.load(op_dir)
        print(f"{name}: cold build {time.perf_counter() - t:.2f} s")
        for i, unit in enumerate(units):
            src = op_dir / unit
            src.write_text(src.read_text() + f"\nint cpp_edit_log_{i}() {{ return {i}; }}\n")
            t = time.perf_counter()
            op.reload()
            seconds = time.perf_counter() - t
            log = Path(op.build.log_path).read_text() if op.build.log_path else ""
            lines = [line for line in log.splitlines() if f"/{unit} " in line or line.endswith(f"/{unit}")]
            print(f"{name}: edit of {unit}: {seconds:.2f} s, compiled={op.build.compiled}")
            for step in _ninja_steps(Path(tmp) / "cache"):
                print("    ninja step:", step)
            for line in _time_report(Path(tmp) / "cache", unit) if report else []:
                print("    gcc:", line)
            for line in lines:
                print("   ", " ".join(w for w in line.split() if "-include" in w or w.endswith(".h")
                                    or "gch" in w or w.startswith("-O") or "ccache" in w))
                print("    full:", line[:1500])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
