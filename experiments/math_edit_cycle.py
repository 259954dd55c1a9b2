"""The math-edit cycle of ``python -m experiments.bench_loader --only-math-edit`` (on a GPU).

On a machine without a GPU, ``python -m experiments.math_edit_cycle --ops scaffold`` times
the CPU rows alone (the math edit to the CPU result, the ``.cpp`` edit after a ``.cu`` edit).

For copies of sigmoid, GELU and resize and a scaffolded op (``python -m jit_loader new``),
each in a private loader cache, every timing from the write of the file to the result:

* the math header (``<op>.h``) edited, to the next CUDA result and to the CPU result (the
  call made right after the CUDA one; it waits for the rebuilt CPU loops). Each edit writes
  a new constant into the math (sigmoid, GELU, the scaffold: ``+ T(r)`` on the forward;
  resize: its tap weights times ``r``, a backward result), so no cache holds it, and the
  row says whether both results carry the new math (each differs from its own before; and
  CUDA equals CPU, except for resize, whose CUDA backward reads the weights on one axis
  only, so that the same edit gives each device another answer);
* the ``.cu`` edited before the process launched any kernel of the op, to the first CUDA
  result (a new process per edit; the edit adds a device function the call does not run);
* the host glue ``<op>.cpp`` edited after a ``.cu`` edit (whose background build is waited
  for first), to the CPU result, with the units that build compiled.

"fresh" is the first edit of each kind in a process whose cache started empty (the op's
first build, not timed, made it; the shared build pieces may still be in the making, as
for a user's first edit); "warm" is the median of ``rounds`` edits in a later process on
the same cache. The process runs as a notebook does (JIT_LOADER_NVRTC_WARM=1) and waits for
the op's background work before its first edit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from experiments.loader_first_build import wait_for_pieces
from experiments.loader_runs import ROOT, median, run

OPS = ("sigmoid", "gelu", "resize", "scaffold")
SCAFFOLD_NAME = "math_edit_op"

# In one interpreter: the op loaded and called on both devices, then the timed edits;
# prints one JSON line.
CYCLE = r"""
import json, os, re, sys, time, torch, jit_loader
from pathlib import Path
kind, op_dir, rounds, offset = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
before_first_launch = sys.argv[5] == "first-launch"
name = op_dir.name
HAS_CUDA = torch.cuda.is_available()
torch.manual_seed(0)
EDITS = {
    "sigmoid": ("sigmoid.h", "return ops_common::sigmoid<kFast>(x);",
                "return ops_common::sigmoid<kFast>(x) + T({r});"),
    "gelu": ("gelu.h", "return x * ops_common::sigmoid<kFast>(T(kAlpha) * x);",
             "return x * ops_common::sigmoid<kFast>(T(kAlpha) * x) + T({r});"),
    "resize": ("resize.h", "return (t.i0 == i ? T(1) - t.l1 : T(0)) + (t.i1 == i ? t.l1 : T(0));",
               "return T({r}) * ((t.i0 == i ? T(1) - t.l1 : T(0)) + (t.i1 == i ? t.l1 : T(0)));"),
    "scaffold": (f"{name}.h", "return signed_square(x);",
                 "return signed_square(x) + T({r});"),
}
header_name, old, new = EDITS[kind]
# What the loader did between the edit and the CPU result (its debug messages, timed from
# the edit): printed beside the table, so a slow row says where its time went.
import logging
trace, edit_started = [], [time.perf_counter()]
class Trace(logging.Handler):
    def emit(self, record):
        trace.append(f"{time.perf_counter() - edit_started[0]:6.2f} s  {record.getMessage()}")
logging.getLogger("jit_loader").addHandler(Trace(logging.DEBUG))
logging.getLogger("jit_loader").setLevel(logging.DEBUG)
header, cu, glue = op_dir / header_name, op_dir / f"{name}_cuda.cu", op_dir / f"{name}.cpp"
originals = {p: p.read_text() for p in (header, cu, glue)}
assert old in originals[header], (header, old)
op = jit_loader.load(op_dir)
if kind == "resize":
    inputs = {"cpu": torch.randn(2, 3, 16, 16)}
    grads = {"cpu": torch.randn(2, 3, 24, 20)}
    if HAS_CUDA:
        inputs["cuda"], grads["cuda"] = inputs["cpu"].cuda(), grads["cpu"].cuda()
    def call(device):
        x = inputs[device].clone().requires_grad_()
        op.resize_bilinear(x, (24, 20)).backward(grads[device])
        return x.grad
else:
    function = getattr(op, {"scaffold": name}.get(kind, kind))
    inputs = {"cpu": torch.randn(1 << 16)}
    if HAS_CUDA:
        inputs["cuda"] = inputs["cpu"].cuda()
    call = lambda device: function(inputs[device])

def cuda_result():
    if not HAS_CUDA:  # a machine without a GPU: the CPU rows alone
        return None
    y = call("cuda")
    torch.cuda.synchronize()
    return y

def settle():
    for p, text in originals.items():
        if p.read_text() != text:
            p.write_text(text)
    op.reload()
    op.wait_for_background()

def compiled_units():
    log = op.build.log_path
    return sorted({Path(p).name for p in re.findall(r" -c (\S+)", Path(log).read_text())}) if log else []

out = {}
if before_first_launch:  # nothing of the op ran in this process
    op.wait_for_background()  # NVRTC's header of the .cu, made ahead as in a notebook
    started = time.perf_counter()
    cu.write_text(originals[cu] + f"\n__device__ float jit_bench_edit_{os.getpid()}(float v) {{ return v + {offset}; }}\n")
    op.reload()
    cuda_result()
    out["first_launch"] = [time.perf_counter() - started]
    out["swapped"] = [op.build.swapped_over is not None]
    settle()
    print(json.dumps(out)); sys.exit()
before = call("cpu")
before_cuda = cuda_result()
op.wait_for_background()
out.update(cuda=[], cpu=[], reload=[], swapped=[], new_math=[], cpp_after_cu=[], cpp_units=[], trace=[])
for i in range(rounds):
    r = offset + i
    started = edit_started[0] = time.perf_counter()
    trace.clear()
    header.write_text(originals[header].replace(old, new.format(r=r), 1))
    op.reload()
    out["reload"].append(time.perf_counter() - started)
    out["swapped"].append(op.build.swapped_over is not None)
    on_cuda = cuda_result()
    out["cuda"].append(time.perf_counter() - started if HAS_CUDA else None)
    on_cpu = call("cpu")
    out["cpu"].append(time.perf_counter() - started)
    changed = not torch.allclose(on_cpu, before) and (
        on_cuda is None or not torch.allclose(on_cuda, before_cuda))
    agree = on_cuda is None or kind == "resize" or torch.allclose(on_cuda.cpu(), on_cpu, rtol=1e-4, atol=1e-4)
    out["new_math"].append(bool(changed and agree))
    trace.append(f"{out['cpu'][-1]:6.2f} s  CPU result")
    out["trace"].append(list(trace))
    op.wait_for_background()
settle()
for i in range(rounds):
    cu.write_text(originals[cu] + f"\n__device__ float jit_bench_edit_{os.getpid()}_{i}(float v) {{ return v + {offset + i}; }}\n")
    op.reload()
    cuda_result()
    op.wait_for_background()
    started = time.perf_counter()
    glue.write_text(originals[glue] + f"\n[[maybe_unused]] static int jit_bench_cpp_edit_{offset + i}() {{ return {i}; }}\n")
    op.reload()
    call("cpu")
    out["cpp_after_cu"].append(time.perf_counter() - started)
    out["cpp_units"].append(compiled_units())
    settle()
print(json.dumps(out))
"""


def _op_copy(kind: str, folder: Path) -> Path:
    if kind == "scaffold":
        from jit_tools.tools import scaffold

        return scaffold.create(SCAFFOLD_NAME, folder, cuda=True).op_dir
    copy = folder / kind
    shutil.copytree(ROOT / "ops" / kind, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def rows(tmp: Path, base_env: dict, rounds: int, ops=OPS, cuda: bool = True) -> list[dict]:
    """One row per op and measurement: fresh, warm, n, note; with ``cuda`` False (no GPU
    here) the CPU rows alone."""
    out = []
    for kind in ops:
        env, env_first = ({**base_env, "JIT_LOADER_CACHE": str(tmp / f"cache-{kind}{suffix}"),
                           "JIT_LOADER_NVRTC_WARM": "1"} for suffix in ("", "-first-launch"))
        op_dir = _op_copy(kind, tmp / f"ops-{kind}")
        # r from 2 on: resize's edit scales its weights by r, and r = 1 would change nothing.
        fresh = run(CYCLE, env, kind, str(op_dir), "1", "2", "cycle")
        # The shared pieces the first build went without are built by a background process
        # at low priority: warm rounds start once it is done, so that none runs beside them.
        wait_for_pieces(Path(env["JIT_LOADER_CACHE"]) / "_shared", [])
        warm = run(CYCLE, env, kind, str(op_dir), str(rounds), "101", "cycle")

        def add(measurement: str, fresh_s, warm_s, n: int, note: str = "") -> None:
            out.append({"op": kind, "measurement": measurement, "fresh": fresh_s, "warm": warm_s,
                        "n": n, "note": note})

        print(f"# {kind}: the loader between the math edit and the CPU result (fresh, first warm round)")
        for line in fresh["trace"][0] + ["--"] + warm["trace"][0]:
            print(f"#   {line}")
        both = fresh["new_math"] + warm["new_math"]
        swapped = fresh["swapped"] + warm["swapped"]
        if cuda:
            note = f"swapped {sum(swapped)}/{len(swapped)}, new math on both {sum(both)}/{len(both)}"
            add("math header edit -> CUDA result", fresh["cuda"][0], median(warm["cuda"]), rounds,
                f"{note}; load() {median(warm['reload']):.3g} s")
            add("math header edit -> CPU result", fresh["cpu"][0], median(warm["cpu"]), rounds)
            first = [run(CYCLE, env_first, kind, str(op_dir), "1", "201", "first-launch")]  # fresh cache
            first += [run(CYCLE, env, kind, str(op_dir), "1", str(202 + i), "first-launch")
                      for i in range(rounds)]
            add(".cu edit before the first launch -> CUDA result", first[0]["first_launch"][0],
                median([f["first_launch"][0] for f in first[1:]]), rounds,
                f"swapped {sum(f['swapped'][0] for f in first)}/{len(first)}")
        else:
            add("math header edit -> CPU result", fresh["cpu"][0], median(warm["cpu"]), rounds,
                f"new math {sum(both)}/{len(both)}; load() {median(warm['reload']):.3g} s")
        add(".cpp edit after a .cu edit -> CPU result", fresh["cpp_after_cu"][0],
            median(warm["cpp_after_cu"]), rounds,
            "compiled: " + ", ".join(sorted({u for units in warm["cpp_units"] for u in units})))
    return out


def main(argv=None) -> int:
    """The CPU rows on a machine without a GPU (on a GPU: bench_loader --only-math-edit)."""
    import argparse
    import tempfile

    import torch

    from experiments.benchutil import environment, format_table, save_json
    from experiments.loader_runs import base_env

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--ops", default="scaffold", help="comma list of " + ", ".join(OPS))
    parser.add_argument("--rounds", type=int, default=3, help="edits of the warm process")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        found = rows(Path(tmp), base_env(), args.rounds, tuple(filter(None, args.ops.split(","))),
                     cuda=torch.cuda.is_available())
    info = environment()
    print(f"# math-edit cycle: {info['device']}, torch {info['torch']}, {info['cores']} cores, "
          f"{info['date']}; wall seconds from the write of the file to the result")
    columns = ["op", "measurement", "fresh", "warm", "n", "note"]
    print(format_table(found, columns))
    if args.json:  # the CPU rows alone are a benchmark of their own
        save_json(args.json, found, "loader-math-edit" if torch.cuda.is_available()
                  else "loader-math-edit-cpu", columns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
