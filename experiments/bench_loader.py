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
  * with --first-build: the first build of the C++ extension tutorial's LLTM through the
    drop-in, load(name=..., sources=[...], extra_cflags=["-O2"]), and of a scaffold fresh
    from `python -m jit_loader new` with extra_cflags=["-DVARIANT_A"], flag sets no build
    used before, in an empty cache and in a cache whose pieces were made for the default
    flags, against torch.utils.cpp_extension.load of the same sources given the flags the
    loader compiles with (its defaults -O3 -fopenmp, then the given ones), and given the
    given flags alone (torch's default: no optimisation, a cheaper compile); each timing
    includes its loader's import (jit_loader; torch.utils.cpp_extension). The
    loader's default leaves the pieces of a new flag set to a background process after
    the build; each measurement waits for it to finish before the next starts.

  * with a GPU (--only-edit-loop runs these alone): a kernel edit until its first result,
    for copies of sigmoid and resize through jit_loader (the edit swapped in through
    NVRTC), and for the same tiny kernel through CuPy RawKernel and Triton (a row says
    "not installed" without them). Each round writes a fresh edit (a device function
    holding the round's number, which the call does not run, so the result is checked
    unchanged), so no cache holds the edited content; NVRTC, CuPy and Triton caches are
    private and start empty. jit_loader's background build of the new key is waited for
    between rounds, outside the timing. The script runs as a notebook session does
    (JIT_LOADER_NVRTC_WARM=1: NVRTC's precompiled header of the .cu is made in the
    background after the load) and waits for that header before the first edit.

  * with a GPU (--only-math-edit runs these alone): the math-edit cycle of
    experiments/math_edit_cycle.py (sigmoid, GELU, resize, a scaffolded op: a math header
    edit to the next CUDA result and to the CPU result, a .cu edit before the first launch,
    a .cpp edit after a .cu edit; fresh cache and warm), CuPy RawKernel and Triton timed in
    the same run.

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
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

from experiments.benchutil import environment, format_table, save_json
from jit_tools import key as keys

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


# CPU seconds of this process and its finished children (the compilers): on a shared
# machine wall time moves with the load, CPU time much less.
CPU = """
import resource
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
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

WARM_ANY = CPU + """
import json, sys, time, torch, jit_loader
t, c = time.perf_counter(), cpu()
op = jit_loader.load_library(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": cpu() - c, "compiled": op.build.compiled}))
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


# argv: the case (JSON: name, sources, flags, folder: an op folder to load, or null for
# the drop-in load of the sources), then for torch's loader its build folder.
OURS_FIRST = CPU + """
import json, sys, time, torch
from pathlib import Path
case = json.loads(sys.argv[1])
t, c = time.perf_counter(), cpu()
import jit_loader  # each loader's import counts: the call a user makes pays it
if case["folder"]:
    jit_loader.load(case["folder"], extra_cflags=case["flags"], verbose=False)
else:
    jit_loader.load(name=case["name"], sources=case["sources"], extra_cflags=case["flags"], verbose=False)
seconds, cpu_seconds = time.perf_counter() - t, cpu() - c
(op,) = [o for o in jit_loader.loaded_ops() if o.name == case["name"]]
assert op.build.compiled
manifest = json.loads((Path(op.library).parent / "manifest.json").read_text())
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "later": manifest["shared"].get("later", [])}))
"""

TORCH_FIRST = CPU + """
import json, os, sys, time, torch
case = json.loads(sys.argv[1])
t, c = time.perf_counter(), cpu()
from torch.utils.cpp_extension import load
load(case["name"], case["sources"], extra_cflags=case["flags"], build_directory=sys.argv[2],
     extra_include_paths=case["include_dirs"], is_python_module=case["folder"] is None,
     verbose=False)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": cpu() - c}))
"""


def _wait_for_pieces(shared_dir: Path, names: list[str], timeout: float = 1800) -> None:
    """Until the background process has built (or failed) every piece in ``names`` and
    exited (it holds ``background.lock`` while it runs), so that none of its work runs
    beside the next measurement."""
    import fcntl
    import time
    deadline = time.monotonic() + timeout

    def background_done() -> bool:
        lock = shared_dir / "background.lock"
        if not lock.exists():
            return True
        with open(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

    while not (all((shared_dir / n / "ok").exists() or (shared_dir / n / "FAILED").exists()
                   for n in names) and background_done()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"shared pieces {names} not built after {timeout} s")
        time.sleep(1)


SAME_FLAGS = "cpp_extension.load, the loader's flags"


def first_build_rows(repeats: int, base_env: dict, tmp: Path) -> list[dict]:
    """First builds of a flag set no build used before, ours vs torch's: the C++ extension
    tutorial's LLTM through the drop-in with extra_cflags=["-O2"], and an op folder fresh
    from `python -m jit_loader new` (the stable-ABI scaffold) with extra_cflags=["-DVARIANT_A"]."""
    samples: dict[str, list[tuple[float, float]]] = {}

    def add(what, m):
        samples.setdefault(what, []).append((m["seconds"], m["cpu"]))
        print(f"  {what}: {m['seconds']:.2f} s (cpu {m['cpu']:.2f} s)", file=sys.stderr, flush=True)

    # Both loaders' modules read from bytecode, as in any process after the first that
    # imported them (torch's come compiled with its wheel; ours are compiled here once).
    env = {k: v for k, v in base_env.items() if k not in ("JIT_LOADER_SHARED_NOW", "PYTHONDONTWRITEBYTECODE")}
    subprocess.run([sys.executable, "-c", "import jit_loader, jit_tools.builder.ninja, torch.utils.cpp_extension"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    for r in range(repeats):
        # A cache that has the pieces of the default flags of both ABIs (a user who loaded
        # ops before).
        warm = tmp / f"first-r{r}-default-pieces"
        for fixture in ("toy_op", "stable_op"):
            folder = tmp / f"first-r{r}-{fixture}" / fixture
            shutil.copytree(FIXTURES / fixture, folder)
            run(WARM_ANY, {**env, "JIT_LOADER_CACHE": str(warm), "JIT_LOADER_SHARED_NOW": "1"}, str(folder))
        for case_name, case in _first_build_cases(tmp / f"first-r{r}-sources"):
            for label, cache in (("empty cache", tmp / f"first-r{r}-{case_name}-empty"),
                                 ("default flags' pieces cached", warm)):
                m = run(OURS_FIRST, {**env, "JIT_LOADER_CACHE": str(cache)}, json.dumps(case))
                add(f"{case_name}: jit_loader.load, {label}", m)
                _wait_for_pieces(cache / "_shared", m["later"])
            # torch's loader given the flags the loader compiles with (its defaults, then the
            # given ones: the same compiler work, so the ratio is the loaders' own cost), and
            # the given flags alone (torch's default, no optimisation: a different compile).
            for label, flags in ((SAME_FLAGS, [*keys.DEFAULT_CFLAGS, *case["flags"]]),
                                 ("cpp_extension.load, the given flags only", case["flags"])):
                build = tmp / f"first-r{r}-{case_name}-torch-build-{len(flags)}"
                build.mkdir()
                add(f"{case_name}: {label}", run(TORCH_FIRST, {**env, "TORCH_NO_COMPILER_WRAPPER": "1"},
                                                 json.dumps(dict(case, flags=flags)), str(build)))
    rows = [{"measurement": what, "median": _median([w for w, _ in v]), "min": min(w for w, _ in v),
             "cpu_median": _median([c for _, c in v]), "n": len(v), "unit": "s"}
            for what, v in samples.items()]
    for what, v in samples.items():
        case_name = what.split(":")[0]
        base = samples[f"{case_name}: {SAME_FLAGS}"]
        if "jit_loader.load" in what:
            rows.append({"measurement": f"  {what} / cpp_extension.load",
                         "median": _median([w for w, _ in v]) / _median([w for w, _ in base]), "min": None,
                         "cpu_median": _median([c for _, c in v]) / _median([c for _, c in base]),
                         "n": None, "unit": "x"})
    return rows


def _first_build_cases(folder: Path) -> list[tuple[str, dict]]:
    """The sources of :func:`first_build_rows`, fresh copies in ``folder`` (no cache or
    build folder has seen their paths)."""
    lltm = folder / "lltm" / "lltm.cpp"
    lltm.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "lltm_tutorial" / "lltm.cpp", lltm)
    subprocess.run([sys.executable, "-m", "jit_loader", "new", "my_op"], cwd=folder, check=True,
                   capture_output=True)
    scaffold = folder / "my_op"
    # torch's loader gets the include folders the loader gives every op folder (its own,
    # and ops/ for the shared headers under ops/common).
    return [("LLTM drop-in -O2", {"name": "lltm_cpp", "sources": [str(lltm)], "flags": ["-O2"],
                                  "folder": None, "include_dirs": []}),
            ("scaffold -DVARIANT_A", {"name": "my_op", "sources": sorted(map(str, scaffold.glob("*.cpp"))),
                                      "flags": ["-DVARIANT_A"], "folder": str(scaffold),
                                      "include_dirs": [str(scaffold), str(ROOT / "ops")]})]


def run(code: str, env: dict, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"measurement failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def _op_folder(op: str) -> Path:
    return FIXTURES / "toy_op" if op == "toy" else ROOT / "ops" / op


def shared_pieces_rows(ops: list[str], repeats: int, base_env: dict, tmp: Path, with_cuda: bool,
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

    base_env = {**base_env, "JIT_LOADER_SHARED_NOW": "1"}
    env_off = {**base_env, "JIT_LOADER_PCH": "0", "JIT_LOADER_CCACHE": "0"}
    for r in range(repeats):
        pool = tmp / f"r{r}-pieces"  # the shared pieces the cold builds of this repeat made
        pool.mkdir()
        for op in ops:
            src = _op_folder(op)
            name = src.name
            if absent is None or op in absent:
                # without: an empty cache (its first build makes the pieces).
                bare_dir = tmp / f"r{r}-{op}-bare" / name
                shutil.copytree(src, bare_dir)
                bare_cache = tmp / f"r{r}-{op}-bare-cache"
                cold = run(WARM_ANY, {**base_env, "JIT_LOADER_CACHE": str(bare_cache)}, str(bare_dir))
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
            out = run(EDIT_CYCLE, {**base_env, "JIT_LOADER_CACHE": str(cache)}, str(op_dir), json.dumps(edits))
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
            warm = run(WARM_ANY, {**base_env, "JIT_LOADER_CACHE": str(cache)}, str(op_dir))
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
                ext_env = {**base_env, "TORCH_NO_COMPILER_WRAPPER": "1"}
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
        rows.append({"op": op, "measurement": what, "median": _median(walls), "min": min(walls),
                     "cpu_median": _median(cpus) if cpus else None, "n": len(values), "unit": "s"})
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


# A kernel edit until its first result, in one interpreter with the op loaded and called
# once (its kernels tracked); prints one JSON line.
EDIT_LOOP = r"""
import json, os, sys, time, torch, jit_loader
from pathlib import Path
from jit_tools.swap import kernels
op_dir, rounds = Path(sys.argv[1]), int(sys.argv[2])
name = op_dir.name
torch.manual_seed(0)
if name == "sigmoid":
    x = torch.randn(1 << 16, device="cuda")
    call = lambda op: op.sigmoid(x)
else:
    x = torch.randn(1, 3, 64, 64, device="cuda")
    call = lambda op: op.resize_bilinear(x, size=(96, 80))
op = jit_loader.load(op_dir)
expected = call(op)
torch.cuda.synchronize()
op.wait_for_background()  # JIT_LOADER_NVRTC_WARM=1, as in a notebook: a user's first edit comes later
(cu,) = sorted(op_dir.glob("*.cu"))
original = cu.read_text()
out = {"seconds": [], "swapped": [], "compiled": [], "reload": []}
for i in range(rounds):
    edit = f"\n__device__ float jit_bench_edit_{os.getpid()}_{i}(float v) {{ return v + {i}; }}\n"
    t = time.perf_counter()
    cu.write_text(original + edit)
    kernels.LAST_SWAP.clear()
    op.reload()
    out["reload"].append(time.perf_counter() - t)
    out.setdefault("nvrtc", []).append(kernels.LAST_SWAP.get("compile_s", float("nan")))
    y = call(op)
    torch.cuda.synchronize()
    out["seconds"].append(time.perf_counter() - t)
    out["swapped"].append(op.build.swapped_over is not None)
    out["compiled"].append(op.build.compiled)
    torch.testing.assert_close(y, expected)
    op.wait_for_background()
print(json.dumps(out))
"""

CUPY_LOOP = r"""
import json, sys, time
try:
    import cupy
except ImportError:
    print(json.dumps({"missing": True})); sys.exit()
rounds = int(sys.argv[1])
SRC = '''
extern "C" __global__ void sigmoid_k(const float* x, float* y, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    y[i] = 1.0f / (1.0f + expf(-x[i])) + ROUND * 0.0f;
}'''
x = cupy.random.standard_normal(1 << 16, dtype=cupy.float32)
y = cupy.empty_like(x)
out = {"seconds": []}
for i in range(-1, rounds):  # round -1: CUDA context and CuPy's first use, not timed
    t = time.perf_counter()
    kernel = cupy.RawKernel(SRC.replace("ROUND", str(i + 7)), "sigmoid_k")
    kernel((256,), (256,), (x, y, cupy.int64(x.size)))
    cupy.cuda.Device().synchronize()
    if i >= 0:
        out["seconds"].append(time.perf_counter() - t)
print(json.dumps(out))
"""

TRITON_LOOP = r"""
import importlib.util, json, sys, tempfile, time
from pathlib import Path
try:
    import torch, triton, triton.language as tl
except ImportError:
    print(json.dumps({"missing": True})); sys.exit()
rounds, folder = int(sys.argv[1]), Path(tempfile.mkdtemp())
SRC = '''
import triton, triton.language as tl
@triton.jit
def sigmoid_k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.sigmoid(x) + ROUND * 0.0, mask=mask)
'''
x = torch.randn(1 << 16, device="cuda")
y = torch.empty_like(x)
out = {"seconds": []}
for i in range(-1, rounds):  # round -1: Triton's first use, not timed
    t = time.perf_counter()
    path = folder / f"bench_triton_{i + 1}.py"
    path.write_text(SRC.replace("ROUND", str(i + 7)))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.sigmoid_k[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    if i >= 0:
        out["seconds"].append(time.perf_counter() - t)
print(json.dumps(out))
"""


def edit_loop_rows(tmp: Path, base_env: dict, rounds: int,
                   ops: tuple[str, ...] = ("sigmoid", "resize")) -> list[dict]:
    """A kernel edit until its first result: jit_loader (sigmoid, resize), CuPy, Triton."""
    env = {**base_env, "JIT_LOADER_CACHE": str(tmp / "edit-cache"), "JIT_LOADER_NVRTC_WARM": "1"}
    rows = []

    def add(route: str, result: dict, note: str = "") -> None:
        if result.get("missing"):
            rows.append({"route": route, "median": None, "min": None, "n": 0, "note": "not installed"})
            return
        times = sorted(result["seconds"])
        rows.append({"route": route, "median": times[len(times) // 2], "min": times[0],
                     "n": len(times), "note": note})

    for name in ops:
        copy = tmp / "edit" / name
        shutil.copytree(ROOT / "ops" / name, copy, ignore=shutil.ignore_patterns("__pycache__"))
        result = run_script(EDIT_LOOP, [str(copy), str(rounds)], env)
        reload = sorted(result["reload"])[len(result["reload"]) // 2]
        nvrtc = sorted(result["nvrtc"])[len(result["nvrtc"]) // 2]
        add(f"jit_loader {name} .cu edit", result,
            f"swapped {sum(result['swapped'])}/{len(result['swapped'])}, "
            f"Ninja on the call's path {sum(result['compiled'])}, reload() median {reload:.3g} s "
            f"(NVRTC {nvrtc:.3g} s)")
    rows += baseline_rows(tmp, env, rounds)
    return rows


def baseline_rows(tmp: Path, env: dict, rounds: int) -> list[dict]:
    """The same tiny kernel edited to its first result through CuPy RawKernel and Triton,
    their caches private and empty (a row says "not installed" without them)."""
    env = {**env, "CUPY_CACHE_DIR": str(tmp / "cupy-cache"), "TRITON_CACHE_DIR": str(tmp / "triton-cache")}
    rows = []
    for route, script in (("CuPy RawKernel, same kernel", CUPY_LOOP),
                          ("Triton @jit, same kernel", TRITON_LOOP)):
        result = run_script(script, [str(rounds)], env)
        if result.get("missing"):
            rows.append({"route": route, "median": None, "min": None, "n": 0, "note": "not installed"})
            continue
        times = sorted(result["seconds"])
        rows.append({"route": route, "median": times[len(times) // 2], "min": times[0],
                     "n": len(times), "note": ""})
    return rows


def run_script(script: str, args: list[str], env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark script failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.pop("JIT_LOADER_VERBOSE", None)
        env.pop("JIT_LOADER_SHARED_DIR", None)  # each cache keeps its own pieces: fresh is fresh
        rows = math_edit_cycle.rows(Path(tmp), env, args.edit_rounds,
                                    tuple(filter(None, args.math_ops.split(","))))
        baselines = baseline_rows(Path(tmp), env, args.edit_rounds)
    env_info = environment()
    print(f"# math-edit cycle: {env_info['device']}, torch {env_info['torch']}, {os.cpu_count()} cores, "
          f"{env_info['date']}; wall seconds from the write of the file to the result")
    print(format_table(rows, ["op", "measurement", "fresh", "warm", "n", "note"]))
    print("# a kernel edit to its first result, same run")
    print(format_table(baselines, ["route", "median", "min", "n", "note"]))
    if args.json:
        save_json(args.json, rows + [{"op": "baseline", **b} for b in baselines],
                  benchmark="loader-math-edit")
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
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
            env.pop("JIT_LOADER_VERBOSE", None)
            rows = edit_loop_rows(Path(tmp), env, args.edit_rounds,
                                  tuple(filter(None, args.edit_ops.split(","))))
        env_info = environment()
        print(f"# kernel edit until its first result: {env_info['device']}, torch "
              f"{env_info['torch']}, {env_info['date']}; wall seconds")
        print(format_table(rows, ["route", "median", "min", "n", "note"]))
        if args.json:
            save_json(args.json, rows, benchmark="loader-edit-loop")
        return 0

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lean, heavy = tmp / "lean" / "toy_op", tmp / "heavy" / "toy_op"
        shutil.copytree(FIXTURES / "toy_op", lean)
        shutil.copytree(FIXTURES / "toy_op", heavy)
        extension_h_variant(heavy)
        base_env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        base_env.pop("JIT_LOADER_VERBOSE", None)
        base_env.pop("JIT_LOADER_SHARED_DIR", None)  # each cache keeps its own pieces
        with_cuda = not args.no_cuda and jit_loader.why_no_cuda() is None
        if args.only_stable:
            stable = stable_rows(tmp, base_env)
            env_info = environment()
            print(f"# the tiny op on the stable ABI and through tvm_ffi: {os.cpu_count()} cores, torch "
                  f"{env_info['torch']}, {env_info['date']}; wall seconds")
            print(format_table(stable, ["measurement", "value", "unit"]), flush=True)
            if args.json:
                save_json(args.json, stable, benchmark="loader-stable")
            return 0
        if args.first_build:
            first = first_build_rows(args.first_repeats, base_env, tmp)
            env_info = environment()
            print(f"# first build of a new flag set: {os.cpu_count()} cores, "
                  f"torch {env_info['torch']}, {env_info['date']}, load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; wall and CPU seconds")
            print(format_table(first, ["measurement", "median", "min", "cpu_median", "n", "unit"]), flush=True)
            if args.json:
                save_json(args.json, first, benchmark="loader-first-build")
            return 0
        if args.ops:
            ops = args.ops.split(",") if args.ops != "all" else ["toy", *jit_loader.available_ops()]
            absent = args.absent.split(",") if args.absent else None
            shared_rows = shared_pieces_rows(ops, args.shared_repeats, base_env, tmp, with_cuda,
                                             absent=absent, plain=not args.no_plain,
                                             cpp_edits=args.cpp_edits.split(",") if args.cpp_edits else None)
            print(f"# loader edit loop: {os.cpu_count()} cores, load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; median and min "
                  "are wall seconds, cpu_median the CPU seconds of the process and its compilers")
            print(format_table(shared_rows, ["op", "measurement", "median", "min", "cpu_median", "n", "unit"]),
                  flush=True)
            if args.json:
                save_json(args.json + ".shared.json", shared_rows, benchmark="loader-shared-pieces")
            if args.shared_only:
                return 0

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

        if not args.no_cuda and jit_loader.why_no_cuda() is None:
            two = tmp / "two" / "toy_cuda"
            shutil.copytree(FIXTURES / "toy_cuda", two)
            env2 = {**base_env, "JIT_LOADER_CACHE": str(tmp / "c3")}
            edits = run(EDIT_ONE_UNIT.format(path=str(two)), env2)
            rows.append({"measurement": "rebuild after editing the .cu", "value": edits["toy_cuda_kernel.cu"],
                         "unit": "s"})
            rows.append({"measurement": "rebuild after editing the .cpp", "value": edits["toy_cuda.cpp"],
                         "unit": "s"})

        rows += stable_rows(tmp, base_env)

    env_info = environment()
    print(f"# loader benchmark: {env_info['device']}, torch {env_info['torch']}, {env_info['date']}, "
          f"cuda arch {jit_loader.cuda_arch_list()}")
    print(format_table(rows, ["measurement", "value", "unit"]))
    if args.json:
        save_json(args.json, rows, benchmark="loader")
    return 0


if __name__ == "__main__":
    sys.exit(main())
