"""How fast is the edit-build-run loop? Times the loader on real builds.

Prints, for tiny fixture ops built in a private cache:
  * cold build of the same one-function op with lean headers (ATen/ATen.h +
    torch/library.h) vs torch/extension.h;
  * warm load of the cached op in a new process (after `import torch`);
  * the no-change check inside a live process (what every `load`/`reload` costs);
  * rebuild after editing one .cu vs one .cpp of a two-unit op (CUDA part needs nvcc);
  * the same tiny op on the LibTorch stable ABI (tests/fixtures/stable_op): cold build
    with its shared pieces absent and present, rebuild after editing its .cpp; and the
    same function through tvm_ffi.cpp.load_inline, cold and after an edit
    (apache-tvm-ffi, optional: the row says "not installed" without it);
  * with --ops: for the tiny op and each bundled op, cold build without the shared
    build pieces (precompiled header, linker probe, compiler cache all empty) and with
    them present, rebuild after editing the .cu, after editing the .cpp (the .cu edit
    reverted first), the revert, warm load in a new process; and the tiny op through
    torch.utils.cpp_extension.load (cold and after an edit) as the baseline. Scenarios
    are interleaved and repeated (--repeats); the table shows medians. (These builds make
    the shared pieces first, JIT_LOADER_SHARED_NOW=1, as they always did.)
  * with --first-build: the first build of a flag set no build used before, ours against
    torch's (experiments/loader_first_build.py);
  * with a GPU, --only-edit-loop: a kernel edit until its first result, jit_loader against
    CuPy and Triton (experiments/loader_edit_loop.py); --only-math-edit: the math-edit
    cycle of experiments/math_edit_cycle.py, CuPy and Triton timed in the same run.

Usage: python -m experiments.bench_loader [--json PATH] [--no-cuda] [--ops toy,sigmoid,...]
       [--repeats N] [--shared-repeats N] [--shared-only] [--absent toy,sigmoid] [--no-plain]
       [--cpp-edits toy,sigmoid] [--only-edit-loop] [--edit-rounds N] [--first-build] [--first-repeats N]
       [--only-math-edit] [--math-ops sigmoid,gelu,resize,scaffold]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from experiments import loader_edit_loop, loader_first_build
from experiments.benchutil import environment, format_table, save_json
from experiments.loader_runs import CPU, FIXTURES, ROOT, WARM_ANY, base_env, median, run

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

EDIT_CYCLE = CPU + """
import json, sys, time, torch, jit_loader
from pathlib import Path
op_dir, edits = Path(sys.argv[1]), json.loads(sys.argv[2])
out = {}
t, c = time.perf_counter(), cpu()
op = jit_loader.load_library(op_dir)
out["cold"] = time.perf_counter() - t
out["cpu cold"] = cpu() - c
out["cold compiled"] = op.build.compiled
out["shared"] = json.loads((Path(op.library).parent / "manifest.json").read_text()).get("shared")
# The C++ autograd piece, which the first import of the op's surface (the first reload
# below) would otherwise build inside the first timed edit (JIT_LOADER_SHARED_NOW=1):
# built here, untimed, as any session after the first finds it.
from jit_tools import autograd
autograd.cpp_library()
for i, name in enumerate(edits):
    f = op_dir / name
    original = f.read_text()
    # A change of code (a comment would be a preprocessed-mode compiler-cache hit).
    f.write_text(original + f"\\nint jit_bench_edit_{i}() {{ return {i}; }}\\n")
    t, c = time.perf_counter(), cpu()
    op.reload()
    out["edit " + name] = time.perf_counter() - t
    out["cpu edit " + name] = cpu() - c
    f.write_text(original)
    t, c = time.perf_counter(), cpu()
    op.reload()
    out["revert " + name] = time.perf_counter() - t
    out["cpu revert " + name] = cpu() - c
    out["revert compiled " + name] = op.build.compiled
print(json.dumps(out))
"""

CPP_EXTENSION = CPU + """
import json, os, sys, time, torch
from torch.utils.cpp_extension import load
src, build_dir = sys.argv[1], sys.argv[2]
t, c = time.perf_counter(), cpu()
load("toy_op_ext", [src], extra_include_paths=[os.path.dirname(src)],
     extra_cflags=["-O3"], is_python_module=False, build_directory=build_dir, verbose=False)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": cpu() - c}))
"""

STABLE_EDIT = """
    import json, time, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    op = jit_loader.load_library(op_dir)
    assert not op.build.compiled
    source = op_dir / "stable_op.cpp"
    # A change of code (a comment would be a preprocessed-mode compiler-cache hit).
    source.write_text(source.read_text() + "\\nint jit_bench_edit() {{ return 1; }}\\n")
    t = time.perf_counter()
    op.reload()
    seconds = time.perf_counter() - t
    y = torch.ops.stable_op.scale(torch.ones(1)).item()
    print(json.dumps({{"seconds": seconds, "compiled": op.build.compiled, "y": y}}))
"""

# The same function as the stable op, through Apache TVM-FFI's JIT (no torch headers).
TVM_FFI = """
    import json, sys, time, torch, tvm_ffi.cpp
    source = r'''
    #include <tvm/ffi/container/tensor.h>
    #include <tvm/ffi/function.h>
    void scale(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
      const float* src = static_cast<const float*>(x.data_ptr());
      float* dst = static_cast<float*>(y.data_ptr());
      for (int64_t i = 0; i < x.size(0); ++i) dst[i] = src[i] * FACTOR;
    }
    '''
    out = {}
    for label, factor in (("cold", "2.0f"), ("edit", "3.0f")):
        t = time.perf_counter()
        mod = tvm_ffi.cpp.load_inline(name="scale_" + label, cpp_sources=source.replace("FACTOR", factor),
                                      functions=["scale"], build_directory=sys.argv[1] + "/" + label)
        x = torch.ones(4)
        y = torch.empty_like(x)
        mod.scale(x, y)
        out[label] = time.perf_counter() - t
    print(json.dumps(out))
"""


def stable_rows(tmp: Path, base_env: dict) -> list[dict]:
    """The tiny stable op: cold build with the stable pieces absent (they are built first),
    cold build of a copy with them present, then the copy's .cpp edited in a live process;
    the same function through tvm_ffi.cpp.load_inline where it is installed."""
    env = {**base_env, "JIT_LOADER_CACHE": str(tmp / "c4")}
    first, second = tmp / "stable_a" / "stable_op", tmp / "stable_b" / "stable_op"
    shutil.copytree(FIXTURES / "stable_op", first)
    shutil.copytree(FIXTURES / "stable_op", second)
    header = second / "stable_op.h"
    header.write_text(header.read_text().replace("kFactor = 2.0f", "kFactor = 3.0f"))
    # The pieces are built before the op (JIT_LOADER_SHARED_NOW=1): by default a background
    # process builds them after the first build, and might not have finished when the
    # second cold build starts.
    absent = run(COLD_BUILD.format(path=str(first)), {**env, "JIT_LOADER_SHARED_NOW": "1"})
    present = run(COLD_BUILD.format(path=str(second)), env)
    edit = run(STABLE_EDIT.format(path=str(second)), env)
    assert absent["compiled"] and present["compiled"] and edit["compiled"] and edit["y"] == 3.0
    rows = [
        {"measurement": "stable ABI: cold build, shared pieces absent", "value": absent["seconds"], "unit": "s"},
        {"measurement": "stable ABI: cold build, shared pieces present", "value": present["seconds"], "unit": "s"},
        {"measurement": "stable ABI: rebuild after editing the .cpp", "value": edit["seconds"], "unit": "s"},
    ]
    try:
        import tvm_ffi  # noqa: F401
    except ImportError:
        rows.append({"measurement": "tvm_ffi.cpp.load_inline", "value": "not installed", "unit": ""})
        return rows
    tvm = run(TVM_FFI, base_env, str(tmp / "tvm"))
    rows.append({"measurement": "tvm_ffi.cpp.load_inline: cold", "value": tvm["cold"], "unit": "s"})
    rows.append({"measurement": "tvm_ffi.cpp.load_inline: after an edit", "value": tvm["edit"], "unit": "s"})
    rows.append({"measurement": "  tvm_ffi edit / stable edit", "value": tvm["edit"] / edit["seconds"], "unit": "x"})
    return rows


def op_folder(op: str) -> Path:
    return FIXTURES / "toy_op" if op == "toy" else ROOT / "ops" / op


def shared_pieces_rows(ops: list[str], repeats: int, env0: dict, tmp: Path, with_cuda: bool,
                       absent: list[str] | None = None, plain: bool = True,
                       cpp_edits: list[str] | None = None) -> list[dict]:
    """Cold build without and with the shared pieces, edit/revert rebuilds and warm load,
    per op; the tiny op through cpp_extension.load. Interleaved: each repeat runs every
    scenario once, so a load change on the machine spreads over all of them.

    ``absent``: the ops whose cold build without the pieces is timed (default: all);
    the others start from the pieces the earlier ops built (a CUDA op needs a CUDA op's).
    ``plain``: also time the tiny op with the precompiled header and ccache off.
    ``cpp_edits``: the ops whose .cpp edit is timed (default: all)."""
    samples: dict[tuple[str, str], list[tuple[float, float | None]]] = {}

    def add(op, what, value, cpu=None):
        samples.setdefault((op, what), []).append((value, cpu))
        cpu_text = f" (cpu {cpu:.3f} s)" if cpu is not None else ""
        print(f"  {op}: {what}: {value:.3f} s{cpu_text}", file=sys.stderr, flush=True)  # progress

    env0 = {**env0, "JIT_LOADER_SHARED_NOW": "1"}
    env_off = {**env0, "JIT_LOADER_PCH": "0", "JIT_LOADER_CCACHE": "0"}
    for r in range(repeats):
        pool = tmp / f"r{r}-pieces"  # the shared pieces the cold builds of this repeat made
        pool.mkdir()
        for op in ops:
            src = op_folder(op)
            name = src.name
            if absent is None or op in absent:
                # without: an empty cache (its first build makes the pieces).
                bare_dir = tmp / f"r{r}-{op}-bare" / name
                shutil.copytree(src, bare_dir)
                bare_cache = tmp / f"r{r}-{op}-bare-cache"
                cold = run(WARM_ANY, {**env0, "JIT_LOADER_CACHE": str(bare_cache)}, str(bare_dir))
                assert cold["compiled"]
                add(op, "cold build, shared pieces absent", cold["seconds"], cold["cpu"])
                shutil.copytree(bare_cache / "_shared", pool, dirs_exist_ok=True)
            # with: a new cache holding only the pieces (header, linker probe); compiler cache empty.
            cache = tmp / f"r{r}-{op}-cache"
            cache.mkdir()
            shutil.copytree(pool, cache / "_shared")
            before = {p.name for p in pool.iterdir()}
            op_dir = tmp / f"r{r}-{op}" / name
            shutil.copytree(src, op_dir)
            edits = []
            if with_cuda:
                edits += sorted(p.name for p in op_dir.glob("*.cu"))
            if cpp_edits is None or op in cpp_edits:
                # Every C++ unit of a bundled op (schema and host side, CPU loops, CUDA host
                # side cost differently); the first of others.
                cpps = sorted(p.name for p in op_dir.glob("*.cpp"))
                edits += cpps if op != "toy" else cpps[:1]
            out = run(EDIT_CYCLE, {**env0, "JIT_LOADER_CACHE": str(cache)}, str(op_dir), json.dumps(edits))
            assert out["cold compiled"]
            built = {p.name for p in (cache / "_shared").iterdir()} - before
            what = "cold build, shared pieces present" + (" (some built)" if any(
                not n.endswith(".lock") for n in built) else "")
            add(op, what, out["cold"], out["cpu cold"])
            for e in edits:
                kind = ".cu" if e.endswith(".cu") else ".cpp"
                what = kind if op == "toy" or kind == ".cu" else e
                add(op, f"rebuild after editing {'the ' if what == kind else ''}{what}", out["edit " + e],
                    out["cpu edit " + e])
                add(op, f"revert of the {what} edit", out["revert " + e], out["cpu revert " + e])
            warm = run(WARM_ANY, {**env0, "JIT_LOADER_CACHE": str(cache)}, str(op_dir))
            assert not warm["compiled"]
            add(op, "warm load in a new process", warm["seconds"], warm["cpu"])
            if op == "toy":
                if plain:
                    plain_dir = tmp / f"r{r}-plain" / name
                    shutil.copytree(src, plain_dir)
                    cold_off = run(WARM_ANY, {**env_off, "JIT_LOADER_CACHE": str(tmp / f"r{r}-plain-cache")},
                                   str(plain_dir))
                    add(op, "cold build, empty cache, PCH=0 CCACHE=0", cold_off["seconds"],
                        cold_off["cpu"])
                ext = tmp / f"r{r}-ext"
                shutil.copytree(src, ext)
                ext_build = tmp / f"r{r}-ext-build"
                ext_build.mkdir()
                # No compiler cache in front of the baseline (torch 2.12+ adds one found
                # on PATH): its store outlives the repeats and would serve their builds.
                ext_env = {**env0, "TORCH_NO_COMPILER_WRAPPER": "1"}
                m = run(CPP_EXTENSION, ext_env, str(ext / "toy_op.cpp"), str(ext_build))
                add(op, "cpp_extension.load: cold build", m["seconds"], m["cpu"])
                f = ext / "toy_op.cpp"
                f.write_text(f.read_text() + "\nint jit_bench_edit_0() { return 0; }\n")
                m = run(CPP_EXTENSION, ext_env, str(f), str(ext_build))
                add(op, "cpp_extension.load: rebuild after editing the .cpp", m["seconds"], m["cpu"])
    rows = []
    for (op, what), values in samples.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values if c is not None]
        rows.append({"op": op, "measurement": what, "median": median(walls), "min": min(walls),
                     "cpu_median": median(cpus) if cpus else None, "n": len(values), "unit": "s"})
    by = {(row["op"], row["measurement"]): row for row in rows}

    def ratio(label, num, den):
        a, b = by.get(("toy", num)), by.get(("toy", den))
        if a and b:
            rows.append({"op": "toy", "measurement": label, "median": a["median"] / b["median"], "min": None,
                         "cpu_median": a["cpu_median"] / b["cpu_median"], "n": None, "unit": "x"})

    ratio("cpp_extension cold / loader cold (pieces present)", "cpp_extension.load: cold build",
          "cold build, shared pieces present")
    ratio("cpp_extension edit / loader .cpp edit", "cpp_extension.load: rebuild after editing the .cpp",
          "rebuild after editing the .cpp")
    return rows


def _beside(path: str, name: str) -> str:
    """``DIR/loader.json`` -> ``DIR/loader-NAME.json``: a second table of the same run."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{name}{p.suffix}"))


def extension_h_variant(op_dir: Path) -> None:
    """The same op, but through the catch-all header most tutorials use."""
    src = op_dir / "toy_op.cpp"
    text = src.read_text().replace("#include <ATen/ATen.h>\n#include <torch/library.h>\n",
                                   "#include <torch/extension.h>\n")
    assert "torch/extension.h" in text
    src.write_text(text)


def math_edit_main(args) -> int:
    """--only-math-edit: the table of experiments/math_edit_cycle.py, then the baselines."""
    import torch

    from experiments import math_edit_cycle

    if not torch.cuda.is_available():
        print("# math-edit cycle: skipped, no GPU visible")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        env = base_env()
        rows = math_edit_cycle.rows(Path(tmp), env, args.edit_rounds,
                                    tuple(filter(None, args.math_ops.split(","))))
        baselines = loader_edit_loop.baseline_rows(Path(tmp), env, args.edit_rounds)
    env_info = environment()
    print(f"# math-edit cycle: {env_info['device']}, torch {env_info['torch']}, {os.cpu_count()} cores, "
          f"{env_info['date']}; wall seconds from the write of the file to the result")
    print(format_table(rows, ["op", "measurement", "fresh", "warm", "n", "note"]))
    print("# a kernel edit to its first result, same run")
    print(format_table(baselines, ["route", "median", "min", "n", "note"]))
    if args.json:
        save_json(args.json, rows + [{"op": "baseline", "measurement": b["route"], "warm": b["median"],
                                      "n": b["n"], "note": b["note"]} for b in baselines],
                  "loader-math-edit", ["op", "measurement", "fresh", "warm", "n", "note"])
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--no-cuda", action="store_true", help="skip the .cu/.cpp rebuild row")
    parser.add_argument("--repeats", type=int, default=5, help="new-process warm loads to time")
    parser.add_argument("--ops", default="", help="comma list of ops for the shared-pieces table "
                        "(toy = the tiny fixture op, or bundled op names; 'all' = toy and every bundled op)")
    parser.add_argument("--shared-repeats", type=int, default=2, help="repeats of the shared-pieces table")
    parser.add_argument("--shared-only", action="store_true", help="only the shared-pieces table")
    parser.add_argument("--absent", default="", help="comma list: the ops whose cold build without "
                        "the shared pieces is timed (default: every op of --ops)")
    parser.add_argument("--cpp-edits", default="", help="comma list: the ops whose .cpp edit is timed "
                        "(default: every op of --ops)")
    parser.add_argument("--first-build", action="store_true",
                        help="only the first build of the drop-in LLTM with -O2, ours against torch's")
    parser.add_argument("--first-repeats", type=int, default=2, help="repeats of --first-build")
    parser.add_argument("--no-plain", action="store_true",
                        help="skip the tiny op's cold build with the precompiled header and ccache off")
    parser.add_argument("--only-edit-loop", action="store_true",
                        help="only the kernel edit loop (jit_loader, CuPy, Triton; needs a GPU)")
    parser.add_argument("--edit-rounds", type=int, default=3, help="edits timed per route")
    parser.add_argument("--edit-ops", default="sigmoid,resize",
                        help="comma list: the bundled ops of the kernel edit loop")
    parser.add_argument("--only-math-edit", action="store_true",
                        help="only the math-edit cycle (experiments/math_edit_cycle.py), with CuPy "
                        "and Triton in the same run; needs a GPU")
    parser.add_argument("--math-ops", default="sigmoid,gelu,resize,scaffold",
                        help="comma list: the ops of the math-edit cycle")
    parser.add_argument("--only-stable", action="store_true",
                        help="only the tiny stable-ABI op (cold, .cpp edit) and tvm_ffi.cpp.load_inline")
    args = parser.parse_args(argv)

    import jit_loader

    if args.only_math_edit:
        return math_edit_main(args)
    if args.only_edit_loop:
        import torch

        if not torch.cuda.is_available():
            print("# kernel edit loop: skipped, no GPU visible")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            rows = loader_edit_loop.edit_loop_rows(Path(tmp), base_env(), args.edit_rounds,
                                                   tuple(filter(None, args.edit_ops.split(","))))
        env_info = environment()
        print(f"# kernel edit until its first result: {env_info['device']}, torch "
              f"{env_info['torch']}, {env_info['date']}; wall seconds")
        print(format_table(rows, ["route", "median", "min", "n", "note"]))
        if args.json:
            save_json(args.json, rows, "loader-edit-loop", ["route", "median", "min", "n", "note"])
        return 0

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lean, heavy = tmp / "lean" / "toy_op", tmp / "heavy" / "toy_op"
        shutil.copytree(FIXTURES / "toy_op", lean)
        shutil.copytree(FIXTURES / "toy_op", heavy)
        extension_h_variant(heavy)
        env0 = base_env()
        with_cuda = not args.no_cuda and jit_loader.why_no_cuda() is None
        if args.only_stable:
            stable = stable_rows(tmp, env0)
            env_info = environment()
            print(f"# the tiny op on the stable ABI and through tvm_ffi: {os.cpu_count()} cores, torch "
                  f"{env_info['torch']}, {env_info['date']}; wall seconds")
            print(format_table(stable, ["measurement", "value", "unit"]), flush=True)
            if args.json:
                save_json(args.json, stable, "loader-stable", ["measurement", "value", "unit"])
            return 0
        if args.first_build:
            first = loader_first_build.first_build_rows(args.first_repeats, env0, tmp)
            env_info = environment()
            print(f"# first build of a new flag set: {os.cpu_count()} cores, "
                  f"torch {env_info['torch']}, {env_info['date']}, load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; wall and CPU seconds")
            print(format_table(first, ["measurement", "median", "min", "cpu_median", "n", "unit"]), flush=True)
            if args.json:
                save_json(args.json, first, "loader-first-build",
                          ["measurement", "median", "min", "cpu_median", "n", "unit"])
            return 0
        if args.ops:
            ops = args.ops.split(",") if args.ops != "all" else ["toy", *jit_loader.available_ops()]
            absent = args.absent.split(",") if args.absent else None
            shared_rows = shared_pieces_rows(ops, args.shared_repeats, env0, tmp, with_cuda,
                                             absent=absent, plain=not args.no_plain,
                                             cpp_edits=args.cpp_edits.split(",") if args.cpp_edits else None)
            print(f"# loader edit loop: {os.cpu_count()} cores, load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; median and min "
                  "are wall seconds, cpu_median the CPU seconds of the process and its compilers")
            print(format_table(shared_rows, ["op", "measurement", "median", "min", "cpu_median", "n", "unit"]),
                  flush=True)
            if args.json:
                save_json(_beside(args.json, "shared"), shared_rows, "loader-shared-pieces",
                          ["op", "measurement", "median", "min", "cpu_median", "n", "unit"])
            if args.shared_only:
                return 0

        cold_lean = run(COLD_BUILD.format(path=str(lean)), {**env0, "JIT_LOADER_CACHE": str(tmp / "c1")})
        cold_heavy = run(COLD_BUILD.format(path=str(heavy)), {**env0, "JIT_LOADER_CACHE": str(tmp / "c2")})
        assert cold_lean["compiled"] and cold_heavy["compiled"]
        rows.append({"measurement": "cold build, ATen.h + library.h", "value": cold_lean["seconds"], "unit": "s"})
        rows.append({"measurement": "cold build, torch/extension.h", "value": cold_heavy["seconds"], "unit": "s"})
        rows.append({"measurement": "  extension.h / lean", "value": cold_heavy["seconds"] / cold_lean["seconds"],
                     "unit": "x"})

        env = {**env0, "JIT_LOADER_CACHE": str(tmp / "c1")}
        warm = [run(WARM_LOAD.format(path=str(lean)), env) for _ in range(args.repeats)]
        assert not any(w["compiled"] for w in warm)
        warm_ms = sorted(w["seconds"] * 1e3 for w in warm)
        rows.append({"measurement": "warm load in a new process (median)", "value": warm_ms[len(warm_ms) // 2],
                     "unit": "ms"})
        nochange = run(NO_CHANGE.format(path=str(lean)), env)
        rows.append({"measurement": "no-change check in a live process", "value": nochange["seconds"] * 1e6,
                     "unit": "us"})

        if not args.no_cuda and jit_loader.why_no_cuda() is None:
            two = tmp / "two" / "toy_cuda"
            shutil.copytree(FIXTURES / "toy_cuda", two)
            # A rebuild each: the kernel swap (NVRTC) would take the .cu edit otherwise.
            env2 = {**env0, "JIT_LOADER_CACHE": str(tmp / "c3"), "JIT_LOADER_NVRTC": "0"}
            edits = run(EDIT_ONE_UNIT.format(path=str(two)), env2)
            rows.append({"measurement": "rebuild after editing the .cu", "value": edits["toy_cuda_kernel.cu"],
                         "unit": "s"})
            rows.append({"measurement": "rebuild after editing the .cpp", "value": edits["toy_cuda.cpp"],
                         "unit": "s"})

        rows += stable_rows(tmp, env0)

    env_info = environment()
    print(f"# loader benchmark: {env_info['device']}, torch {env_info['torch']}, {env_info['date']}, "
          f"cuda arch {jit_loader.cuda_arch_list()}")
    print(format_table(rows, ["measurement", "value", "unit"]))
    if args.json:
        save_json(args.json, rows, "loader", ["measurement", "value", "unit"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
