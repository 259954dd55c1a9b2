"""The first build of a flag set no build used before, ours against torch's
(``python -m experiments.bench_loader --first-build``): the C++ extension tutorial's LLTM
through the drop-in, ``load(name=..., sources=[...], extra_cflags=["-O2"])``, and a scaffold
fresh from ``python -m jit_loader new`` with ``extra_cflags=["-DVARIANT_A"]``, in an empty
cache and in a cache whose pieces were made for the default flags, against
``torch.utils.cpp_extension.load`` of the same sources given the flags the loader compiles
with (its defaults, then the given ones) and given the given flags alone (torch's default:
no optimisation, a cheaper compile). Each timing includes its loader's import. The loader
leaves the pieces of a new flag set to a background process after the build; each
measurement waits for it to finish before the next starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from experiments.loader_runs import CPU, FIXTURES, ROOT, WARM_ANY, median, run
from jit_tools import key as keys

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

def wait_for_pieces(shared_dir: Path, names: list[str], timeout: float = 1800) -> None:
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
        for case_name, case in first_build_cases(tmp / f"first-r{r}-sources"):
            for label, cache in (("empty cache", tmp / f"first-r{r}-{case_name}-empty"),
                                 ("default flags' pieces cached", warm)):
                m = run(OURS_FIRST, {**env, "JIT_LOADER_CACHE": str(cache)}, json.dumps(case))
                add(f"{case_name}: jit_loader.load, {label}", m)
                wait_for_pieces(cache / "_shared", m["later"])
            # torch's loader given the flags the loader compiles with (its defaults, then the
            # given ones: the same compiler work, so the ratio is the loaders' own cost), and
            # the given flags alone (torch's default, no optimisation: a different compile).
            for label, flags in ((SAME_FLAGS, [*keys.DEFAULT_CFLAGS, *case["flags"]]),
                                 ("cpp_extension.load, the given flags only", case["flags"])):
                build = tmp / f"first-r{r}-{case_name}-torch-build-{len(flags)}"
                build.mkdir()
                add(f"{case_name}: {label}", run(TORCH_FIRST, {**env, "TORCH_NO_COMPILER_WRAPPER": "1"},
                                                 json.dumps(dict(case, flags=flags)), str(build)))
    rows = [{"measurement": what, "median": median([w for w, _ in v]), "min": min(w for w, _ in v),
             "cpu_median": median([c for _, c in v]), "n": len(v), "unit": "s"}
            for what, v in samples.items()]
    for what, v in samples.items():
        case_name = what.split(":")[0]
        base = samples[f"{case_name}: {SAME_FLAGS}"]
        if "jit_loader.load" in what:
            rows.append({"measurement": f"  {what} / cpp_extension.load",
                         "median": median([w for w, _ in v]) / median([w for w, _ in base]), "min": None,
                         "cpu_median": median([c for _, c in v]) / median([c for _, c in base]),
                         "n": None, "unit": "x"})
    return rows

def first_build_cases(folder: Path) -> list[tuple[str, dict]]:
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
