"""What the loader's benchmarks share (``bench_loader``, ``loader_first_build``,
``loader_edit_loop``, ``math_edit_cycle``): each measurement runs as a script in a fresh
interpreter, as a user's new process would, and prints one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# CPU seconds of this process and its finished children (the compilers): on a shared
# machine wall time moves with the load, CPU time much less.
CPU = """
import resource
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
"""

# A load of the op folder argv[1] in a new process: wall and CPU seconds, whether it compiled.
WARM_ANY = CPU + """
import json, sys, time, torch, jit_loader
t, c = time.perf_counter(), cpu()
op = jit_loader.load_library(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": cpu() - c, "compiled": op.build.compiled}))
"""


def run(code: str, env: dict, *args: str) -> dict:
    """The JSON line the script ``code`` prints last, run with ``args`` in a fresh
    interpreter in the repository's root."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"measurement failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median(values):
    values = sorted(values)
    n = len(values)
    if not n:
        return None
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def base_env() -> dict:
    """The environment of the measured processes: this checkout first on the path, no
    verbose builds, and each cache with its own shared pieces (fresh is fresh)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("JIT_LOADER_VERBOSE", None)
    env.pop("JIT_LOADER_SHARED_DIR", None)
    return env
