"""How fast is the edit-build-run loop? Times the loader on real builds.

Prints, for tiny fixture ops built in a private cache:
  * cold build of the same one-function op with lean headers (ATen/ATen.h +
    torch/library.h) vs torch/extension.h;
  * warm load of the cached op in a new process (after `import torch`);
  * the no-change check inside a live process (what every `load`/`reload` costs);
  * rebuild after editing one .cu vs one .cpp of a two-unit op (CUDA part needs nvcc).

Usage: python -m experiments.bench_loader [--json PATH] [--no-cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

from experiments.benchutil import environment, format_table, save_json

# Each measurement runs in its own interpreter and prints one JSON line.
COLD_BUILD = """
    import json, time, torch, jit_loader
    t = time.perf_counter()
    op = jit_loader.load_library({path!r})
    print(json.dumps({{"seconds": time.perf_counter() - t, "compiled": op.build.compiled}}))
"""

WARM_LOAD = """
    import json, time, torch, jit_loader
    t = time.perf_counter()
    op = jit_loader.load_library({path!r})
    torch.ops.toy_op.scale(torch.ones(1))
    print(json.dumps({{"seconds": time.perf_counter() - t, "compiled": op.build.compiled}}))
"""

NO_CHANGE = """
    import json, time, torch, jit_loader
    op = jit_loader.load({path!r})
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        op.reload()
    print(json.dumps({{"seconds": (time.perf_counter() - t) / n}}))
"""

EDIT_ONE_UNIT = """
    import json, time, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    op = jit_loader.load(op_dir)
    out = {{}}
    for name, old, new in [("toy_cuda_kernel.cu", "x[i] + 1.0f", "x[i] + 2.0f"),
                           ("toy_cuda.cpp", "return x + 1;", "return x + 2;")]:
        f = op_dir / name
        f.write_text(f.read_text().replace(old, new))
        t = time.perf_counter()
        op.reload()
        out[name] = time.perf_counter() - t
    print(json.dumps(out))
"""


def run(code: str, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"measurement failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def extension_h_variant(op_dir: Path) -> None:
    """The same op, but through the catch-all header most tutorials use."""
    src = op_dir / "toy_op.cpp"
    text = src.read_text().replace("#include <ATen/ATen.h>\n#include <torch/library.h>\n",
                                   "#include <torch/extension.h>\n")
    assert "torch/extension.h" in text
    src.write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--no-cuda", action="store_true", help="skip the .cu/.cpp rebuild row")
    parser.add_argument("--repeats", type=int, default=5, help="new-process warm loads to time")
    args = parser.parse_args(argv)

    import jit_loader

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lean, heavy = tmp / "lean" / "toy_op", tmp / "heavy" / "toy_op"
        shutil.copytree(FIXTURES / "toy_op", lean)
        shutil.copytree(FIXTURES / "toy_op", heavy)
        extension_h_variant(heavy)
        base_env = dict(os.environ, PYTHONPATH=str(ROOT))
        base_env.pop("JIT_LOADER_VERBOSE", None)

        cold_lean = run(COLD_BUILD.format(path=str(lean)), {**base_env, "JIT_LOADER_CACHE": str(tmp / "c1")})
        cold_heavy = run(COLD_BUILD.format(path=str(heavy)), {**base_env, "JIT_LOADER_CACHE": str(tmp / "c2")})
        assert cold_lean["compiled"] and cold_heavy["compiled"]
        rows.append({"measurement": "cold build, ATen.h + library.h", "value": cold_lean["seconds"], "unit": "s"})
        rows.append({"measurement": "cold build, torch/extension.h", "value": cold_heavy["seconds"], "unit": "s"})
        rows.append({"measurement": "  extension.h / lean", "value": cold_heavy["seconds"] / cold_lean["seconds"],
                     "unit": "x"})

        env = {**base_env, "JIT_LOADER_CACHE": str(tmp / "c1")}
        warm = [run(WARM_LOAD.format(path=str(lean)), env) for _ in range(args.repeats)]
        assert not any(w["compiled"] for w in warm)
        warm_ms = sorted(w["seconds"] * 1e3 for w in warm)
        rows.append({"measurement": "warm load in a new process (median)", "value": warm_ms[len(warm_ms) // 2],
                     "unit": "ms"})
        nochange = run(NO_CHANGE.format(path=str(lean)), env)
        rows.append({"measurement": "no-change check in a live process", "value": nochange["seconds"] * 1e6,
                     "unit": "us"})

        if not args.no_cuda and jit_loader._why_no_cuda() is None:
            two = tmp / "two" / "toy_cuda"
            shutil.copytree(FIXTURES / "toy_cuda", two)
            env2 = {**base_env, "JIT_LOADER_CACHE": str(tmp / "c3")}
            edits = run(EDIT_ONE_UNIT.format(path=str(two)), env2)
            rows.append({"measurement": "rebuild after editing the .cu", "value": edits["toy_cuda_kernel.cu"],
                         "unit": "s"})
            rows.append({"measurement": "rebuild after editing the .cpp", "value": edits["toy_cuda.cpp"],
                         "unit": "s"})

    env_info = environment()
    print(f"# loader benchmark: {env_info['device']}, torch {env_info['torch']}, {env_info['date']}, "
          f"cuda arch {jit_loader.cuda_arch_list()}")
    print(format_table(rows, ["measurement", "value", "unit"]))
    if args.json:
        save_json(args.json, rows, benchmark="loader")
    return 0


if __name__ == "__main__":
    sys.exit(main())
