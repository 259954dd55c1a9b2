"""Is the first use on a machine as fast as later ones? An op's edit and its call cost in
the process that meets an empty cache, against a process that finds the cache warm.

Each repeat makes a new cache (its own shared pieces: JIT_LOADER_SHARED_DIR and
JIT_LOADER_SHARED_NOW unset, as for a new user) and a copy of the op, then:
  * first process: loads the op (it builds, and starts the shared pieces in the
    background: both ABIs' precompiled headers, the linker probe, the fast entry, the C++
    autograd kernel), waits until they are built (as a user's first edit comes after a
    while), loads again (nothing edited: the surface takes the pieces up), times the op's
    call on a tiny tensor against its native twin, then edits one file (a function
    appended) and times ``reload()``;
  * warm process: the same cache in a new process, the same call timing and the same kind
    of edit.
The table shows medians over the repeats; the targets: the first process's edit within
1.5x of the warm one's, and its call ratio as the warm process's (the call-overhead
limits of experiments/RESULTS.md).

Usage: python -m experiments.first_use [--op sigmoid] [--edit sigmoid.cpp] [--device cpu|cuda]
       [--repeats N] [--no-cuda] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NATIVE = {"sigmoid": "torch.sigmoid", "gelu": "lambda t: torch.nn.functional.gelu(t)"}

SESSION = """
import fcntl, json, os, sys, time, torch, jit_loader
from pathlib import Path
from experiments import benchutil
from jit_tools import autograd, fastcall, store
from jit_tools.builder.process_pieces import autograd_piece, building, fastcall_piece
op_dir, edit, device, first, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
native = eval(sys.argv[6], {"torch": torch})
name = op_dir.name
op = jit_loader.load(op_dir)
out = {"compiled": op.build.compiled}
if first:
    started = time.perf_counter()
    lock = store.current().shared_folder() / "background.lock"
    while True:  # the pieces' background builds: this process's, and the flag set's
        busy = building(fastcall_piece) or building(autograd_piece)
        if not busy and lock.exists():
            fd = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy = True
            finally:
                os.close(fd)
        if not busy or time.perf_counter() - started > 1800:
            break
        time.sleep(0.5)
    out["pieces_wait_s"] = time.perf_counter() - started
    out["reloaded"] = op.reload()  # nothing edited: the surface takes the pieces up
out["fast_entry"] = fastcall.is_fast(op.module._FORWARD)
out["cpp_autograd"] = autograd.cpp_library() is not None  # the surface imported since uses it
x = torch.randn(16, device=device)
fns = {"ours": lambda: getattr(op, name)(x), "native": lambda: native(x)}
t = benchutil.host_time(fns, device)
out["call_ratio"] = t["ours"].best / t["native"].best
out["call_us"] = t["ours"].best * 1e6
path = op_dir / edit
path.write_text(path.read_text() + f"\\nint jit_first_use_edit_{n}() {{ return {n}; }}\\n")
t0 = time.perf_counter()
op.reload()
getattr(op, name)(x)
benchutil.sync(torch.device(device))
out["edit_s"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def session(op_dir: Path, edit: str, device: str, first: bool, n: int, env: dict, native: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SESSION, str(op_dir), edit, device, "1" if first else "0",
                           str(n), native], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"session failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="sigmoid", choices=sorted(NATIVE))
    parser.add_argument("--edit", help="the file of the op to edit (default: <op>.cpp)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-cuda", action="store_true", help="build the op's C++ units only")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    edit = args.edit or f"{args.op}.cpp"
    records = []
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="jit_first_use_") as tmp:
            tmp = Path(tmp)
            op_dir = tmp / args.op
            shutil.copytree(ROOT / "ops" / args.op, op_dir, ignore=shutil.ignore_patterns("__pycache__", "_C*"))
            env = dict(os.environ, JIT_LOADER_CACHE=str(tmp / "cache"), PYTHONPATH=str(ROOT),
                       JIT_LOADER_PREBUILT="0")
            for var in ("JIT_LOADER_SHARED_DIR", "JIT_LOADER_SHARED_NOW", "JIT_LOADER_VERBOSE"):
                env.pop(var, None)
            if args.no_cuda:
                env["CUDA_HOME"] = str(tmp / "no_cuda")
            first = session(op_dir, edit, args.device, True, 2 * r, env, NATIVE[args.op])
            warm = session(op_dir, edit, args.device, False, 2 * r + 1, env, NATIVE[args.op])
            records.append({"repeat": r, "first": first, "warm": warm})
            print(f"repeat {r}: first {first}\n          warm  {warm}", file=sys.stderr, flush=True)
    rows = []
    for what, unit in (("edit_s", "s"), ("call_us", "us"), ("call_ratio", "x native")):
        a = statistics.median(rec["first"][what] for rec in records)
        b = statistics.median(rec["warm"][what] for rec in records)
        rows.append({"measurement": what, "first process": round(a, 4), "warm process": round(b, 4),
                     "first / warm": round(a / b, 3), "unit": unit})
    for rec in records:
        for key in ("fast_entry", "cpp_autograd"):
            if not (rec["first"][key] and rec["warm"][key]):
                print(f"warning: repeat {rec['repeat']}: {key} not used in every process", file=sys.stderr)
    from experiments import benchutil

    print(f"{args.op}, edit of {edit}, device {args.device}, {args.repeats} repeats "
          f"({benchutil.device_name(args.device) if args.device != 'cpu' else 'CPU'})")
    print(benchutil.format_table(rows))
    edit_ratio = rows[0]["first / warm"]
    print(f"first edit / warm edit: {edit_ratio} (target <= 1.5: {'met' if edit_ratio <= 1.5 else 'missed'})")
    if args.json:
        benchutil.save_json(args.json, rows, "first-use", op=args.op, edit=edit, device=args.device,
                            records=records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
