"""The first build of a new flag set, jit_loader against torch.utils.cpp_extension.load,
counted in instructions (valgrind's callgrind) instead of seconds: the count does not move
with the load of a shared machine. Same cases and code as ``bench_loader --first-build``
(an empty cache; torch's loader given the flags the loader compiles with); every process of
each build is counted (the Python process, Ninja, the compilers, the assembler, the linker),
except the loader's background process that builds the shared pieces for the next build.

    python -m experiments.ab.first_build_instructions [--case scaffold|lltm]

The two builds run side by side, each under valgrind (about 50 times slower than native:
a few minutes for the scaffold, much longer for the LLTM). Needs valgrind.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections import defaultdict
from pathlib import Path

from experiments import loader_first_build
from jit_tools import key as keys

ROOT = Path(__file__).resolve().parents[2]
CASES = {"scaffold": "scaffold -DVARIANT_A", "lltm": "LLTM drop-in -O2"}


def kind(command: str) -> str:
    exe = os.path.basename(command.split()[0]) if command.split() else "?"
    if exe.startswith("python"):
        return "Python process"
    if exe in ("cc1plus", "cc1"):
        return "compiler (cc1plus)"
    if exe == "as":
        return "assembler"
    if exe in ("ld", "ld.gold", "ld.bfd", "collect2"):
        return "linker"
    return "other (ninja, sh, c++ driver, probes)"


def count(folder: Path, prefix: str) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for out in folder.glob(f"{prefix}.*"):
        text = out.read_text(errors="replace")
        cmd = re.search(r"^cmd:\s*(.*)$", text, re.M)
        total = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        if cmd and total:
            totals[kind(cmd.group(1))] += int(total.group(1))
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="scaffold")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items()
           if k not in ("JIT_LOADER_SHARED_NOW", "PYTHONDONTWRITEBYTECODE", "JIT_LOADER_VERBOSE",
                        "JIT_LOADER_SHARED_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # Both loaders' modules from bytecode, as in any process after the first.
    subprocess.run([sys.executable, "-c", "import jit_loader, jit_tools.builder.ninja, torch.utils.cpp_extension"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        case = dict(loader_first_build.first_build_cases(tmp / "ours-src"))[CASES[args.case]]
        theirs = dict(loader_first_build.first_build_cases(tmp / "torch-src"))[CASES[args.case]]
        theirs = dict(theirs, flags=[*keys.DEFAULT_CFLAGS, *theirs["flags"]])
        (tmp / "torch-build").mkdir()
        valgrind = ["valgrind", "--tool=callgrind", "--trace-children=yes"]
        runs = {
            "jit_loader.load": subprocess.Popen(
                [*valgrind, "--trace-children-skip-by-arg=*jit_tools.builder.ninja_file*",
                 f"--callgrind-out-file={tmp}/ours.%p", sys.executable, "-c",
                 textwrap.dedent(loader_first_build.OURS_FIRST), json.dumps(case)],
                cwd=ROOT, env={**env, "JIT_LOADER_CACHE": str(tmp / "cache")},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            "cpp_extension.load": subprocess.Popen(
                [*valgrind, f"--callgrind-out-file={tmp}/torch.%p", sys.executable, "-c",
                 textwrap.dedent(loader_first_build.TORCH_FIRST), json.dumps(theirs), str(tmp / "torch-build")],
                cwd=ROOT, env={**env, "TORCH_NO_COMPILER_WRAPPER": "1"},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        }
        for name, proc in runs.items():
            _out, err = proc.communicate()
            if proc.returncode != 0:
                print(err[-3000:], file=sys.stderr)
                raise SystemExit(f"{name} failed under valgrind")
        ours, torch_ = count(tmp, "ours"), count(tmp, "torch")
    print(f"# first build of a new flag set in instructions (callgrind): {CASES[args.case]}, "
          f"empty cache; torch's loader given the loader's flags; {os.cpu_count()} cores")
    print(f"| {'process':40s} | {'jit_loader.load':>16s} | {'cpp_extension.load':>18s} | ratio |")
    print(f"|{'-' * 42}|{'-' * 18}|{'-' * 20}|-------|")
    for k in sorted(set(ours) | set(torch_)) + ["total"]:
        a = sum(ours.values()) if k == "total" else ours.get(k, 0)
        b = sum(torch_.values()) if k == "total" else torch_.get(k, 0)
        ratio = f"{a / b:.3f}" if b else "-"
        print(f"| {k:40s} | {a / 1e9:14.3f} G | {b / 1e9:16.3f} G | {ratio:>5s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
