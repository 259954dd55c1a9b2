"""Live edits of an op's math: a header edit reaches the CUDA kernels through NVRTC before
``load`` returns, the CPU loops that include it rebuild in the background, and no call on
any device returns the old math after ``load`` returned (jit_tools/swap/edits.py judges
the edit, jit_tools/swap/gate.py holds the CPU calls, ARCHITECTURE.md "Header edits").

Without a GPU: which edits are live (texts only); NVRTC compiles the edited math into every
kernel of a build; and the whole load path with the GPU's part done by NVRTC and nothing
installed: a CPU call made right after ``load`` returns waits for the rebuilt CPU loops and
gives the new math, a compile error only the host compiler sees makes CPU calls raise it
(no hang) and the next load too, a revert serves the live build again at once. On a GPU
(marked ``cuda``): the same edits give the new math on CUDA at once, in kernels launched
before the edit, in kernels first launched after it, and in a process that edited before
its first launch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import jit_loader
from jit_tools import sources
from jit_tools.swap import edits
from jit_tools.tools import scaffold
from subproc import ROOT, json_result, private_env, run_python

CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None
HAS_CUDA = CAN_BUILD_CUDA and __import__("torch").cuda.is_available()
OPS = ROOT / "ops"
SIGMOID_FORWARD = "return ops_common::sigmoid<kFast>(x);"
SCAFFOLD_FORWARD = "return signed_square(x);"


# ---- which edits are live (texts only) ---------------------------------------------------

def _texts(op_dir: Path):
    compiled = sources.walk_sources(op_dir)
    include_dirs = sources.include_dirs(op_dir, {})
    files = {*compiled, *sources.local_headers(compiled, include_dirs)}
    return {p: p.read_bytes() for p in files}, compiled, include_dirs


def _judge(tmp_path, op: str, file: str, old: str, new: str, extra: dict | None = None):
    """The judgement of one edit of a copy of the bundled op ``op`` (``extra``: files to add
    to the copy before its texts count as the live build's)."""
    op_dir = tmp_path / op
    shutil.copytree(OPS / op, op_dir, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in (extra or {}).items():
        (op_dir / name).write_text(text)
    live, compiled, include_dirs = _texts(op_dir)
    path = op_dir / file
    text = path.read_text()
    assert old in text, (file, old)
    path.write_text(text.replace(old, new, 1))
    verdict = edits.judge(live, _texts(op_dir)[0], compiled, include_dirs)
    return verdict if isinstance(verdict, str) else sorted(p.name for p in verdict.stale_units)


@pytest.mark.parametrize("op,file,old,new,stale", [
    ("sigmoid", "sigmoid.h", SIGMOID_FORWARD, "return ops_common::sigmoid<kFast>(T(2) * x);",
     ["sigmoid_cpu.cpp"]),
    ("gelu", "gelu.h", "return grad * (s +", "return T(2) * grad * (s +", ["gelu_cpu.cpp"]),
    # resize's weights: the kernels and the CPU loops use them, the launchers do not
    ("resize", "resize.h", "return (t.i0 == i ? T(1) - t.l1 : T(0))",
     "return T(1) * (t.i0 == i ? T(1) - t.l1 : T(0))", ["resize_cpu.cpp"]),
    # a kernel body of a .cu no host unit includes: nothing stale
    ("lltm", "lltm_cuda.cu", "new_h(b, j) = from_acc<scalar_t>(r.new_h);",
     "new_h(b, j) = from_acc<scalar_t>(r.new_h + 1);", []),
])
def test_math_edits_are_live_with_the_cpu_loops_stale(tmp_path, op, file, old, new, stale):
    assert _judge(tmp_path, op, file, old, new) == stale


def test_an_edit_of_ops_common_math_is_live(tmp_path):
    """sigmoid's math calls ops_common::sigmoid (common/scalar_math.h): an edit of that body
    is live for sigmoid, its CPU loops stale (a copy of ops/ keeps the include paths)."""
    ops = tmp_path / "ops"
    shutil.copytree(OPS, ops, ignore=shutil.ignore_patterns("__pycache__"))
    op_dir = ops / "sigmoid"
    compiled = sources.walk_sources(op_dir)
    include_dirs = [op_dir, ops]
    files = {*compiled, *sources.local_headers(compiled, include_dirs)}
    live = {p: p.read_bytes() for p in files}
    math = ops / "common" / "scalar_math.h"
    assert math in live
    text = math.read_text()
    body = "const T e = exp_nonpositive<kFast>(-std::abs(x));"
    assert body in text
    math.write_text(text.replace(body, "const T e = exp_nonpositive<kFast>(-std::abs(x) - T(0));", 1))
    now = {p: p.read_bytes() for p in files}
    verdict = edits.judge(live, now, compiled, include_dirs)
    assert not isinstance(verdict, str), verdict
    assert [p.name for p in verdict.stale_units] == ["sigmoid_cpu.cpp"]


@pytest.mark.parametrize("op,file,old,new,why", [
    # the tag types are host glue's: every unit sees them
    ("sigmoid", "sigmoid_types.h", '"sigmoid.forward"', '"sigmoid.fwd"', "host code of sigmoid_types.h"),
    # a constant outside a function body is host code
    ("gelu", "gelu.h", "constexpr double kAlpha = 1.702;", "constexpr double kAlpha = 1.8;",
     "host code of gelu.h"),
    # the launchers compute their grids from resize's coordinate math: a build
    ("resize", "resize.h", "return src > T(0) ? src : T(0);", "return src > T(0) ? src : T(0.0);",
     "host code of resize_cuda.cu calls source_coordinate"),
    ("sigmoid", "sigmoid.cpp", 'm.def("forward', ' m.def("forward', "sigmoid.cpp is a host source"),
    # scatter's CPU loops are stale (scatter_cpu.cpp), but scatter.cpp registers more than
    # schemas and CPU kernels (its C++ autograd; its schemas span adjacent string literals,
    # which the judge takes for a kernel): the CPU gate would not hold every way in
    ("scatter", "scatter.h", "return R == Reduce::kMax ? v > best : v < best;",
     "return R == Reduce::kMax ? v >= best : v < best;", "scatter.cpp registers a kernel"),
])
def test_other_edits_build(tmp_path, op, file, old, new, why):
    assert why in _judge(tmp_path, op, file, old, new)


@pytest.mark.parametrize("unit,why", [
    # a CPU-loop unit that registers a CUDA kernel: its code runs under CUDA calls
    ('#include "sigmoid.h"\nSTABLE_TORCH_LIBRARY_IMPL(sigmoid, CUDA, m) {}\n',
     "extra_cpu.cpp registers more than CPU kernels"),
    # a kernel at another key reaches the stale loops past the CPU gate
    ('STABLE_TORCH_LIBRARY_IMPL(sigmoid, CompositeExplicitAutograd, m) {}\n',
     "extra.cpp registers a kernel at CompositeExplicitAutograd"),
    ('STABLE_TORCH_LIBRARY_FRAGMENT(sigmoid, m) { m.def("extra(Tensor x) -> Tensor", &f); }\n',
     "extra.cpp registers a kernel in a schema block"),
])
def test_ways_past_the_cpu_gate_build(tmp_path, unit, why):
    name = "extra_cpu.cpp" if "sigmoid.h" in unit else "extra.cpp"
    assert why in _judge(tmp_path, "sigmoid", "sigmoid.h", SIGMOID_FORWARD,
                         "return ops_common::sigmoid<kFast>(T(2) * x);", {name: unit})


def test_a_schema_only_block_leaves_the_gate_sufficient(tmp_path):
    unit = 'STABLE_TORCH_LIBRARY_FRAGMENT(sigmoid, m) { m.def("extra(Tensor x) -> Tensor"); }\n'
    assert _judge(tmp_path, "sigmoid", "sigmoid.h", SIGMOID_FORWARD,
                  "return ops_common::sigmoid<kFast>(T(2) * x);", {"extra.cpp": unit}) == \
        ["sigmoid_cpu.cpp"]


def test_device_free_view_leaves_out_host_device_bodies_only():
    text = ("template <typename T>\nOPS_HOST_DEVICE T f(T x) { return x; }\n"
            "constexpr int kN = 4;\ninline int host_only(int v) { return v; }\n")
    body = text.replace("return x;", "return x + 1;")
    assert edits.device_free_view(body) == edits.device_free_view(text)
    assert edits.changed_host_device(text, body) == {"f"}
    assert edits.host_view(body) != edits.host_view(text)  # host code may call it
    for host_edit in (text.replace("kN = 4", "kN = 5"), text.replace("return v;", "return -v;")):
        assert edits.device_free_view(host_edit) != edits.device_free_view(text)


def test_unbalanced_bodies_are_not_judged():
    with pytest.raises(edits.Unbalanced):
        edits.device_free_view("OPS_HOST_DEVICE int f() {\n#if A\n{\n#endif\n return 1; }\n")


# ---- NVRTC takes the edited math (no GPU needed) ---------------------------------------------

@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_nvrtc_compiles_the_edited_math_into_every_kernel_of_the_build(tmp_path):
    """Every kernel instantiation of the bundled sigmoid build, compiled by NVRTC from a copy
    whose math header multiplies the forward by 3: same symbols, and the PTX of each forward
    kernel holds the new constant (3.0f, 0f40400000) where the unedited math's has none."""
    from jit_tools.swap import kernels, nvrtc

    in_use = nvrtc.library_kernels(jit_loader.load("sigmoid").library)
    copy = tmp_path / "sigmoid"
    shutil.copytree(OPS / "sigmoid", copy, ignore=shutil.ignore_patterns("__pycache__"))
    header = copy / "sigmoid.h"
    plain, _ = kernels.compile_in_use("sigmoid", copy, in_use, "9.0+PTX")
    header.write_text(header.read_text().replace(
        SIGMOID_FORWARD, "return T(3) * ops_common::sigmoid<kFast>(x);"))
    edited, exprs = kernels.compile_in_use("sigmoid", copy, in_use, "9.0+PTX")
    assert sorted(exprs.values()) == sorted(in_use)
    assert b"0f40400000" in edited.image and b"0f40400000" not in plain.image


# ---- the load path, the GPU's part done by NVRTC alone ---------------------------------------

# Runs in a new process (a copy of sigmoid registers the bundled op's namespace). In mode
# "nvrtc" the swap compiles what a GPU would, every kernel of the library with NVRTC for
# sm_90, and installs nothing (there may be no GPU); in mode "cpu" the process sees no GPU
# (no kernel can run, only the CPU side is live); in mode "gpu" the swap is the real one and
# CUDA calls check the kernels. The background build, and the link of the CPU side ahead of
# it, wait a second before compiling, so a CPU call that did not wait would see the old math.
LIVE_EDITS = r"""
import json, re, sys, time
from pathlib import Path
import torch, jit_loader
from jit_tools import store as stores
from jit_tools.errors import BuildError
from jit_tools.swap import gate, hotswap, kernels, nvrtc

op_dir, function, header = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
old, new, broken, other, mode = sys.argv[4:9]
cuda = mode == "gpu"
if mode == "cpu":  # a process without a GPU: only the CPU side is live
    hotswap.gpu_visible = lambda: False
if mode == "nvrtc":
    compiled = []
    def swap_without_a_gpu(state, opts=None, texts=None):
        found, exprs = kernels.compile_in_use(state.name, state.op_dir,
                                              nvrtc.library_kernels(state.library), "9.0", opts)
        compiled.append(len(exprs))
        return list(exprs)
    hotswap.gpu_visible = lambda: True
    kernels.swap = swap_without_a_gpu
def slowed(real):
    def slow(*args, **kwargs):
        time.sleep(1.0)
        return real(*args, **kwargs)
    return slow
hotswap.builder.build = slowed(hotswap.builder.build)
hotswap.cpu_link.link_ahead = slowed(hotswap.cpu_link.link_ahead)

op = jit_loader.load(op_dir)
f = getattr(op, function)
x = torch.linspace(-3, 3, 7, dtype=torch.float64)
out = {"before": f(x).tolist(), "live_key": op.build.key}
original = header.read_text()
if cuda:  # double's kernel launched before the edit, float's only after it
    xc = x.cuda()
    out["cuda_before"] = f(xc).cpu().tolist()

def reload_timed():
    started = time.perf_counter()
    changed = op.reload()
    return changed, time.perf_counter() - started

# 1. The math edit: live, the CPU call right after load waits and gives the new math.
header.write_text(original.replace(old, new, 1))
changed, out["load_s"] = reload_timed()
out["swapped_over"] = op.build.swapped_over
out["rebuilding"] = op._state.background.is_alive()
out["stale_units"] = list(op._state.cpu_side.rebuild.units)
started = time.perf_counter()
out["after"] = f(x).tolist()
out["cpu_call_s"] = time.perf_counter() - started
out["linked_ahead"] = ".cpu-" in op._state.cpu_side.overlay[3].name  # not the published build
if cuda:
    out["cuda_after"] = f(xc).cpu().tolist()
    out["cuda_float_first_launch"] = f(xc.float()).double().cpu().tolist()
xg = x.clone().requires_grad_()
f(xg).sum().backward()  # autograd through the new CPU kernels
out["grad_finite"] = bool(torch.isfinite(xg.grad).all())
op.wait_for_background()
log = Path(jit_loader.cache_dir()) / op.name / "builds" / op.build.key / "build.log"
out["compiled_units"] = sorted({Path(p).name for p in re.findall(r" -c (\S+)", log.read_text())})

# 2. A compile error only the host compiler sees: CPU calls raise it, without hanging,
#    and so does the next load; a fix is live again.
header.write_text(original.replace(old, broken, 1))
changed, _ = reload_timed()
if cuda:  # the kernels run what the sources say: the host-only line is not theirs
    out["cuda_broken"] = f(xc).cpu().tolist()
try:
    f(x)
    out["broken_call"] = "no error"
except BuildError as e:
    out["broken_call"] = str(e).splitlines()[0]
try:
    op.reload()
    out["broken_reload"] = "no error"
except BuildError as e:
    out["broken_reload"] = str(e).splitlines()[0]
header.write_text(original.replace(old, other, 1))
changed, _ = reload_timed()
out["fixed"] = f(x).tolist()
op.wait_for_background()

# 3. The header back, a kernel body of the .cu edited: live, nothing stale, and the CPU
#    kernels are the live build's again (not the last edit's).
cu = next(op_dir.glob("*.cu"))
cu_text = cu.read_text()
header.write_text(original)
cu.write_text(cu_text + "\n__device__ float jit_test_unused(float v) { return v; }\n")
op.reload()
out["header_back_cu_edited"] = [f(x).tolist(), op.build.swapped_over is not None]
op.wait_for_background()

# 4. Back to the live build's sources: its own kernels at once, nothing compiled; the
#    same while a background build of another edit still runs.
cu.write_text(cu_text)
changed, out["revert_s"] = reload_timed()
out["reverted"] = [f(x).tolist(), op.build.compiled, op.build.swapped_over]
if cuda:
    out["cuda_reverted"] = f(xc).cpu().tolist()
header.write_text(original.replace(old, other.replace("(3)", "(4)"), 1))  # a key not built yet
op.reload()
out["building_when_reverted"] = op._state.background.is_alive()
header.write_text(original)
op.reload()
out["reverted_while_building"] = f(x).tolist()
op.wait_for_background()
out["gates_left"] = sum(len(r.gates) for r in op._state.cpu_side.earlier) + (
    len(op._state.cpu_side.rebuild.gates) if op._state.cpu_side.rebuild else 0)
out["overlay"] = op._state.cpu_side.overlay is not None
print(json.dumps(out))
"""


def _live_edits(cache: Path, op_dir: Path, function: str, header: Path, old: str, new: str,
                broken: str, other: str, mode: str) -> dict:
    return json_result(run_python(LIVE_EDITS, op_dir, function, header, old, new, broken, other,
                                  mode, env=private_env(cache), timeout=1800))


def _check_live_edits(out: dict, header: Path, math, old_math, broken_line: int,
                      mode: str) -> None:
    import torch

    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    close = lambda got, want: torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), want)  # noqa: E731
    close(out["before"], old_math(x))
    assert out["swapped_over"] == out["live_key"] and out["rebuilding"]
    close(out["after"], math(x, 2))  # the new math, never the old
    assert out["cpu_call_s"] > 0.5  # it waited for the background build
    assert out["linked_ahead"]  # the CPU side linked alone, ahead of nvcc
    assert out["grad_finite"]
    assert out["broken_call"].startswith(f"{header}:{broken_line}:"), out["broken_call"]
    assert out["broken_reload"] == out["broken_call"]
    close(out["fixed"], math(x, 3))
    close(out["header_back_cu_edited"][0], old_math(x))
    # A kernel edit alone is swapped; without a GPU it builds, as nothing here could run it.
    assert out["header_back_cu_edited"][1] == (mode != "cpu")
    close(out["reverted"][0], old_math(x))
    # Nothing compiled. Without a GPU the live build is the first one again; on a GPU an edit
    # in between may have been activated in full, and the first build's kernels are then
    # swapped in over it.
    assert out["reverted"][1] is False
    assert out["reverted"][2] is None or mode == "gpu", out["reverted"]
    assert out["building_when_reverted"]
    close(out["reverted_while_building"], old_math(x))
    assert out["gates_left"] == 0 and not out["overlay"]
    if "cuda_before" in out:  # on a GPU: the kernels too, launched before the edit or not
        close(out["cuda_before"], old_math(x))
        close(out["cuda_after"], math(x, 2))
        torch.testing.assert_close(torch.tensor(out["cuda_float_first_launch"], dtype=torch.float64),
                                   math(x, 2), rtol=1e-6, atol=1e-6)
        close(out["cuda_broken"], old_math(x))
        close(out["cuda_reverted"], old_math(x))


def _each_mode(tmp_path, modes: list[str], op_dir: Path, function: str, header: Path, old: str,
               new: str, broken: str, other: str, math, old_math, units: list[str]) -> None:
    """The scenario in each mode, one after another on the same copy (each ends with the
    sources as they were), each in a loader cache of its own. The copy's paths are the
    same in every mode, so the later modes' compiles are hits in the ccache store the test
    run shares: they build and link as the first did, without compiling again."""
    line = header.read_text().split(old)[0].count("\n") + 3
    for mode in modes:
        out = _live_edits(tmp_path / f"cache-{mode}", op_dir, function, header, old, new, broken,
                          other, mode)
        try:
            _check_live_edits(out, header, math, old_math, line, mode)
            # The background build compiled the CPU loops and the kernels: no host glue.
            assert out["compiled_units"] == units, out["compiled_units"]
        except AssertionError as e:
            raise AssertionError(f"mode {mode}: {e}") from e


def _broken(body: str) -> str:
    """``body`` behind a line only the host compiler reads (NVRTC and nvcc define
    __CUDACC__), which calls what nothing declares."""
    return "\n#if !defined(__CUDACC__)\n  return not_declared_here();\n#endif\n  " + body


# Without a GPU: the kernels swapped through NVRTC (its compile checked, nothing launched),
# then a process that sees no GPU (only the CPU side is live). On a GPU, the kernels run.
MODES = [pytest.param(["nvrtc", "cpu"], id="nvrtc-then-cpu"), pytest.param(["gpu"], id="gpu", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU visible")])]


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
@pytest.mark.parametrize("modes", MODES)
def test_a_math_header_edit_of_a_copied_sigmoid(tmp_path, modes):
    import torch

    op_dir = tmp_path / "sigmoid"
    shutil.copytree(OPS / "sigmoid", op_dir, ignore=shutil.ignore_patterns("__pycache__"))
    _each_mode(tmp_path, modes, op_dir, "sigmoid", op_dir / "sigmoid.h", SIGMOID_FORWARD,
               SIGMOID_FORWARD.replace("(x)", "(T(2) * x)"), _broken(SIGMOID_FORWARD),
               SIGMOID_FORWARD.replace("(x)", "(T(3) * x)"),
               lambda x, k: torch.sigmoid(k * x), torch.sigmoid,
               ["sigmoid_cpu.cpp", "sigmoid_cuda.cu"])


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
@pytest.mark.parametrize("modes", MODES)
def test_a_math_header_edit_of_a_scaffolded_op(tmp_path, modes):
    name = "live_math_op"
    plan = scaffold.create(name, tmp_path / "ops_here", cuda=True)
    new = "return T(2) * signed_square(x);"
    _each_mode(tmp_path, modes, plan.op_dir, name, plan.op_dir / f"{name}.h", SCAFFOLD_FORWARD,
               new, _broken(SCAFFOLD_FORWARD), new.replace("T(2)", "T(3)"),
               lambda x, k: k * x * x.abs(), lambda x: x * x.abs(),
               [f"{name}_cpu.cpp", f"{name}_cuda.cu"])


# ---- the gate's wait is bounded ----------------------------------------------------------------

def test_a_gate_never_waits_for_a_build_that_ended_without_a_result():
    import threading

    from jit_tools.errors import JitLoaderError
    from jit_tools.swap import gate

    rebuild = gate.Rebuild("probe", "K", ("probe_cpu.cpp",))
    rebuild.thread = threading.Thread(target=lambda: None)
    rebuild.thread.start()
    rebuild.thread.join()
    with pytest.raises(JitLoaderError, match="ended without a result"):
        gate.wait(rebuild)
    running = gate.Rebuild("probe", "K", ("probe_cpu.cpp",))
    stop = threading.Event()
    running.thread = threading.Thread(target=stop.wait, args=(30,))
    running.thread.start()
    try:
        with pytest.raises(JitLoaderError, match="still being rebuilt after 0.3 s"):
            gate.wait(running, timeout=0.3)
    finally:
        stop.set()


# ---- an edit before the first launch (GPU) -------------------------------------------------

BEFORE_FIRST_LAUNCH = r"""
import json, sys
from pathlib import Path
import torch, jit_loader
op_dir, header, old, new = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
op = jit_loader.load(op_dir)  # no kernel of the op has run in this process
header.write_text(header.read_text().replace(old, new, 1))
op.reload()
x = torch.linspace(-3, 3, 7, device="cuda")
out = {"swapped_over": op.build.swapped_over is not None, "compiled": op.build.compiled,
       "cuda": op.sigmoid(x).cpu().tolist(), "cpu": op.sigmoid(x.cpu()).tolist()}
op.wait_for_background()
print(json.dumps(out))
"""


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU visible")
def test_a_header_edit_before_the_first_launch(tmp_path):
    """Its kernels compile through NVRTC at their first launch; the Ninja build follows."""
    import torch

    op_dir = tmp_path / "sigmoid"
    shutil.copytree(OPS / "sigmoid", op_dir, ignore=shutil.ignore_patterns("__pycache__"))
    out = json_result(run_python(BEFORE_FIRST_LAUNCH, op_dir, op_dir / "sigmoid.h", SIGMOID_FORWARD,
                                 SIGMOID_FORWARD.replace("(x)", "(T(2) * x)"),
                                 env=private_env(tmp_path / "cache"), timeout=1800))
    assert out["swapped_over"] and not out["compiled"]
    want = torch.sigmoid(2 * torch.linspace(-3, 3, 7))
    torch.testing.assert_close(torch.tensor(out["cuda"]), want)
    torch.testing.assert_close(torch.tensor(out["cpu"]), want)


RESIZE_GRADS = r"""
import json, sys
from pathlib import Path
import torch, jit_loader
op_dir, old, new = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
op = jit_loader.load(op_dir)
torch.manual_seed(0)
x, g = torch.randn(2, 3, 16, 16), torch.randn(2, 3, 24, 20)  # the math-edit cycle's call

def grad(device):
    xd = x.to(device).clone().requires_grad_()
    op.resize_bilinear(xd, (24, 20)).backward(g.to(device))
    return xd.grad.cpu().tolist()

out = {"before": {"cuda": grad("cuda"), "cpu": grad("cpu")}}
if old:
    header = op_dir / "resize.h"
    header.write_text(header.read_text().replace(old, new, 1))
    op.reload()
    out["swapped_over"] = op.build.swapped_over is not None
    out["after"] = {"cuda": grad("cuda"), "cpu": grad("cpu")}
op.wait_for_background()
print(json.dumps(out))
"""
RESIZE_WEIGHT = "return (t.i0 == i ? T(1) - t.l1 : T(0)) + (t.i1 == i ? t.l1 : T(0));"


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU visible")
def test_a_resize_weight_edit_swapped_in_gives_what_a_build_of_it_gives(tmp_path):
    """The kernels NVRTC swapped in after an edit of resize.h compute what a new process's
    build of the same sources computes, on each device (an op whose kernels do not all read
    the edited function gives the same answer both ways)."""
    import torch

    op_dir = tmp_path / "resize"
    shutil.copytree(OPS / "resize", op_dir, ignore=shutil.ignore_patterns("__pycache__"))
    env = private_env(tmp_path / "cache")
    edited = json_result(run_python(RESIZE_GRADS, op_dir, RESIZE_WEIGHT, f"return T(3) * ({RESIZE_WEIGHT[7:-1]});",
                                    env=env, timeout=1800))
    built = json_result(run_python(RESIZE_GRADS, op_dir, "", "", env=env, timeout=1800))["before"]
    assert edited["swapped_over"]
    for device in ("cuda", "cpu"):
        torch.testing.assert_close(torch.tensor(edited["after"][device]), torch.tensor(built[device]),
                                   msg=lambda m: f"{device}: {m}")
    t = {k: torch.tensor(v) for k, v in {**{f"{d}_before": edited["before"][d] for d in ("cuda", "cpu")},
                                          **{f"{d}_after": built[d] for d in ("cuda", "cpu")}}.items()}
    print("edit changed CUDA:", not torch.allclose(t["cuda_before"], t["cuda_after"]),
          "CPU:", not torch.allclose(t["cpu_before"], t["cpu_after"]),
          "CPU and CUDA agree after it:", torch.allclose(t["cuda_after"], t["cpu_after"], rtol=1e-4, atol=1e-4))
