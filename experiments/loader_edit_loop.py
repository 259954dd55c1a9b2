"""A kernel edit until its first result (``python -m experiments.bench_loader
--only-edit-loop``, needs a GPU): copies of sigmoid and resize through jit_loader (the edit
swapped in through NVRTC), and the same tiny kernel through CuPy RawKernel and Triton (a row
says "not installed" without them). Each round writes a fresh edit (a device function
holding the round's number, which the call does not run, so the result is checked
unchanged), so no cache holds the edited content; NVRTC, CuPy and Triton caches are private
and start empty. jit_loader's background build of the new key is waited for between rounds,
outside the timing. The script runs as a notebook session does (JIT_LOADER_NVRTC_WARM=1:
NVRTC's precompiled header of the .cu is made in the background after the load) and waits
for that header before the first edit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from experiments.loader_runs import ROOT, run

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
        result = run(EDIT_LOOP, env, str(copy), str(rounds))
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
        result = run(script, env, str(rounds))
        if result.get("missing"):
            rows.append({"route": route, "median": None, "min": None, "n": 0, "note": "not installed"})
            continue
        times = sorted(result["seconds"])
        rows.append({"route": route, "median": times[len(times) // 2], "min": times[0],
                     "n": len(times), "note": ""})
    return rows
