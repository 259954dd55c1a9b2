"""Reload edges a researcher meets in a live notebook: an op's schema changes, a source is
deleted, an activation fails while the op's Python surface is imported, ``clean`` runs
while another process builds.

Like test_jit_loader.py, each scenario runs real builds in fresh processes against a
private cache, with a timeout: none of them may hang.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from subproc import json_result, private_env, run_cli, run_python, start_python, wait_for
from toy_ops import EDIT_SCRIPT, copy_op

TIMEOUT = 600  # a hang fails the test instead of blocking the suite


def scaffold(tmp_path: Path, name: str, env: dict) -> Path:
    proc = run_cli("new", name, "--aten", "--dir", tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp_path / name


# The scaffold's forward gains an argument (schema, both kernels' C++ signatures, the
# Python surface's autograd), the commonest edit while an op is written. Before, a load
# after it never returned: the failed activation imported the surface, whose
# load_library(__file__) started the activation again.
SCHEMA_CHANGE = EDIT_SCRIPT + """
    cpp, py = op_dir / "sch_op.cpp", op_dir / "sch_op.py"
    cpp_text, py_text = cpp.read_text(), py.read_text()
    op = jit_loader.load(op_dir)
    x = torch.randn(5, dtype=torch.float64)
    out["before"] = torch.allclose(op.sch_op(x), x * x.abs())
    held = torch.ops.sch_op.forward.default  # a variable holding the old operator
    held_fast = jit_loader.fast_op(held)  # and its fast entry
    out["fast_before"] = (type(held_fast) is not type(held)
                          and torch.allclose(held_fast(x), x * x.abs()))
    compiled = torch.compile(lambda t: torch.ops.sch_op.forward(t) + 1, backend="eager")
    out["compiled_before"] = torch.allclose(compiled(x), x * x.abs() + 1)

    cpp.write_text(cpp_text
        .replace('m.def("forward(Tensor x) -> Tensor");',
                 'm.def("forward(Tensor x, float scale=1.0) -> Tensor");')
        .replace("at::Tensor forward_cpu(const at::Tensor& x) {{",
                 "at::Tensor forward_cpu(const at::Tensor& x, double scale) {{")
        .replace("  return y;\\n}}\\n\\nat::Tensor backward_cpu", "  return y * scale;\\n}}\\n\\nat::Tensor backward_cpu"))
    def edit(text, old, new):
        assert old in text, old  # the scaffold's text this test edits
        return text.replace(old, new)
    # The gradient of the new argument's scaling is no op of its own: Python autograd.
    autograd = (
        "def _setup_context(ctx, inputs, output):\\n    x, scale = inputs\\n"
        "    ctx.save_for_backward(x)\\n    ctx.scale = scale\\n\\n\\n"
        "def _backward(ctx, grad):\\n    (x,) = ctx.saved_tensors\\n"
        "    return torch.ops.sch_op.backward(grad, x) * ctx.scale, None\\n\\n\\n"
        "torch.library.register_autograd(\\"sch_op::forward\\", _backward, "
        "setup_context=_setup_context, lib=LIB)")
    text = edit(py_text, "def _forward_fake(x):", "def _forward_fake(x, scale=1.0):")
    text = edit(text, 'jit_loader.register_autograd_op("sch_op::forward", "sch_op::backward", ["grad", "x"], lib=LIB)',
                autograd)
    text = edit(text, "def sch_op(x: torch.Tensor) -> torch.Tensor:",
                "def sch_op(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:")
    text = edit(text, "return _FORWARD(x)", "return _FORWARD(x, scale)")
    py.write_text(text)
    jit_loader.load(op_dir)
    out["schema"] = str(torch.ops.sch_op.forward.default._schema)
    out["new_call"] = torch.allclose(torch.ops.sch_op.forward(x, 3.0), 3 * x * x.abs())
    out["handle_follows"] = torch.allclose(op.sch_op(x, 2.0), 2 * x * x.abs())
    xg = x.clone().requires_grad_()
    out["gradcheck"] = torch.autograd.gradcheck(lambda t: op.sch_op(t, 2.5), (xg,))
    try:
        torch.ops.sch_op.forward(x, "not a number")
        out["bad_call"] = "ran"
    except RuntimeError as e:
        out["bad_call"] = str(e).splitlines()[0]
    try:
        held(x)
        out["held"] = "ran"
    except RuntimeError as e:
        out["held"] = str(e)
    try:
        held_fast(x)
        out["held_fast"] = "ran"
    except RuntimeError as e:
        out["held_fast"] = str(e)
    out["compiled_after"] = torch.allclose(compiled(x), x * x.abs() + 1)  # traced again
    compiled_new = torch.compile(lambda t: torch.ops.sch_op.forward(t, 2.0), backend="eager",
                                 fullgraph=True)
    out["compiled_new"] = torch.allclose(compiled_new(x), 2 * x * x.abs())

    cpp.write_text(cpp_text)
    py.write_text(py_text)
    jit_loader.load(op_dir)  # and back: the earlier build, its schema again
    out["reverted"] = str(torch.ops.sch_op.forward.default._schema)
    out["reverted_call"] = torch.allclose(op.sch_op(x), x * x.abs())
    out["reverted_compiled"] = torch.allclose(compiled(x), x * x.abs() + 1)
    print(json.dumps(out))
"""


def test_schema_change_reloads_live_with_the_surface(tmp_path):
    env = private_env(tmp_path / "cache")
    op_dir = scaffold(tmp_path, "sch_op", env)
    r = json_result(run_python(SCHEMA_CHANGE.format(path=str(op_dir)), env=env, timeout=TIMEOUT))
    assert r["before"] and r["compiled_before"]
    assert r["schema"] == "sch_op::forward(Tensor x, float scale=1.) -> Tensor", r["schema"]
    assert r["new_call"] and r["handle_follows"] and r["gradcheck"]
    assert "sch_op::forward" in r["bad_call"] and "scale" in r["bad_call"], r["bad_call"]
    assert r["held"].startswith("sch_op::forward belongs to a build that was replaced"), r["held"]
    assert "torch.ops.sch_op.forward" in r["held"]
    # The fast entry of the old operator was retired with it: no call reaches freed memory.
    assert r["fast_before"]
    assert r["held_fast"] == r["held"], r["held_fast"]
    assert r["compiled_after"] and r["compiled_new"]
    assert r["reverted"] == "sch_op::forward(Tensor x) -> Tensor", r["reverted"]
    assert r["reverted_call"] and r["reverted_compiled"]


# A failing activation with a surface present ends in one error, and so does a surface
# interrupted while it imports (KeyboardInterrupt ends the call; the next load recovers).
FAILURES = EDIT_SCRIPT + """
    cpp, py = op_dir / "fail_op.cpp", op_dir / "fail_op.py"
    cpp_text, py_text = cpp.read_text(), py.read_text()
    op = jit_loader.load(op_dir)
    x = torch.randn(4)
    cpp.write_text(cpp_text.replace('m.impl("forward", &forward_cpu);',
                                    'm.impl("forward", &forward_cpu);\\n  m.impl("forwrd", &forward_cpu);'))
    out["dangling"] = first_line_of_reload()
    out["still_runs"] = torch.allclose(op.fail_op(x), x * x.abs())
    cpp.write_text(cpp_text)
    py.write_text(py_text.replace("jit_loader.load_library(__file__)",
                                  "jit_loader.load_library(__file__)\\nraise KeyboardInterrupt"))
    try:
        jit_loader.load(op_dir)
        out["interrupt"] = "loaded"
    except KeyboardInterrupt:
        out["interrupt"] = "interrupted"
    py.write_text(py_text)
    jit_loader.load(op_dir)
    out["recovered"] = torch.allclose(op.fail_op(x), x * x.abs())
    print(json.dumps(out))
"""


def test_failed_activation_and_interrupt_end_in_one_error(tmp_path):
    env = private_env(tmp_path / "cache")
    op_dir = scaffold(tmp_path, "fail_op", env)
    r = json_result(run_python(FAILURES.format(path=str(op_dir)), env=env, timeout=TIMEOUT))
    assert "fail_op::forwrd" in r["dangling"] and "no m.def declares" in r["dangling"], r["dangling"]
    assert r["still_runs"]
    assert r["interrupt"] == "interrupted"
    assert r["recovered"]


# Where the old operator truly cannot go: TorchScript resolved it to a native handle at
# compile time, and a Library made in a notebook cell holds a kernel for it. Each keeps
# the one-line refusal, the previous build keeps running, and once the holder is gone
# (the Library destroyed) the change loads.
HELD_ELSEWHERE = EDIT_SCRIPT + """
    source = op_dir / "toy_op.cpp"
    original = source.read_text()
    changed = (original
        .replace('m.def("scale(Tensor x) -> Tensor");', 'm.def("scale(Tensor x, float f) -> Tensor");')
        .replace("at::Tensor scale_cpu(const at::Tensor& x) {{",
                 "at::Tensor scale_cpu(const at::Tensor& x, double f) {{")
        .replace("return x * kFactor;", "return x * kFactor * f;"))
    jit_loader.load(op_dir)
    notebook_lib = torch.library.Library("toy_op", "FRAGMENT")
    notebook_lib.impl("scale", lambda x: x.new_empty(x.shape), "Meta")
    source.write_text(changed)
    out["library"] = first_line_of_reload()
    out["library_old_runs"] = torch.ops.toy_op.scale(torch.ones(2)).tolist()
    notebook_lib._destroy()
    out["after_destroy"] = first_line_of_reload()
    out["new_runs"] = torch.ops.toy_op.scale(torch.ones(2), 3.0).tolist()

    source.write_text(original)
    jit_loader.load(op_dir)
    scripted = torch.jit.trace(lambda t: torch.ops.toy_op.scale(t), torch.ones(2))
    source.write_text(changed)
    out["torchscript"] = first_line_of_reload()
    out["scripted_runs"] = scripted(torch.ones(2)).tolist()
    print(json.dumps(out))
"""


def test_schema_change_refused_only_where_something_else_holds_the_op(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    r = json_result(run_python(HELD_ELSEWHERE.format(path=str(op_dir)), cache=tmp_path / "cache",
                               timeout=TIMEOUT))
    assert r["library"].startswith("op 'toy_op' changed a schema: toy_op::scale was "
                                   "`toy_op::scale(Tensor x) -> Tensor`"), r["library"]
    assert "Registrations made outside op 'toy_op'" in r["library"]
    assert r["library_old_runs"] == [2.0, 2.0]
    assert r["after_destroy"] == "loaded"
    assert r["new_runs"] == [6.0, 6.0]
    assert "TorchScript code compiled against the old schema" in r["torchscript"], r["torchscript"]
    assert "restart" in r["torchscript"] and "previous build stays loaded" in r["torchscript"]
    assert r["scripted_runs"] == [2.0, 2.0]


EXTRA_CPP = """#include <ATen/ATen.h>
#include <torch/library.h>

at::Tensor twice_cpu(const at::Tensor& x) { return x * 2; }

TORCH_LIBRARY_FRAGMENT(toy_op, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(toy_op, CPU, m) { m.impl("twice", &twice_cpu); }
"""

DELETED_SOURCE = """
    import json, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    extra = op_dir / "extra.cpp"
    out = {{}}
    op = jit_loader.load(op_dir)
    held = torch.ops.toy_op.twice.default
    out["twice"] = op.twice(torch.ones(2)).tolist()
    text = extra.read_text()
    extra.unlink()
    jit_loader.load(op_dir)
    out["scale"] = op.scale(torch.ones(2)).tolist()
    out["ops"] = jit_loader.ops_in("toy_op")
    for label, call in (("torch_ops", lambda: torch.ops.toy_op.twice(torch.ones(2))),
                        ("handle", lambda: op.twice(torch.ones(2))),
                        ("held", lambda: held(torch.ones(2)))):
        try:
            call()
            out[label] = "ran"
        except (AttributeError, RuntimeError) as e:
            out[label] = str(e).splitlines()[0]
    extra.write_text(text)
    jit_loader.load(op_dir)
    out["back"] = op.twice(torch.ones(2)).tolist()
    print(json.dumps(out))
"""


def test_deleted_source_withdraws_its_op_and_keeps_the_rest(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    (op_dir / "extra.cpp").write_text(EXTRA_CPP)
    r = json_result(run_python(DELETED_SOURCE.format(path=str(op_dir)), cache=tmp_path / "cache",
                               timeout=TIMEOUT))
    assert r["twice"] == [2.0, 2.0]
    assert r["scale"] == [2.0, 2.0]
    assert r["ops"] == ["scale"]
    assert "twice" in r["torch_ops"] and "no attribute" in r["torch_ops"], r["torch_ops"]
    assert "twice" in r["handle"], r["handle"]
    assert r["held"].startswith("toy_op::twice belongs to a build that was replaced"), r["held"]
    assert r["back"] == [2.0, 2.0]


SLOW_CXX = """#!/bin/sh
# A compiler that takes a few seconds longer per unit: room for `clean` to run while
# the op builds and while a second process waits for that build.
sleep 4
exec c++ "$@"
"""

BUILD = """
    import json, sys, torch, jit_loader
    op = jit_loader.load({path!r})
    print(json.dumps({{"compiled": op.build.compiled, "y": torch.ops.toy_op.scale(torch.ones(2)).tolist()}}))
"""


def test_clean_in_a_loop_never_removes_a_build_being_made_or_handed_over(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    wrapper = tmp_path / "slow-cxx"
    wrapper.write_text(SLOW_CXX)
    wrapper.chmod(0o755)
    # No precompiled header: through the wrapper (another compiler to the loader) the build
    # would first precompile one of its own, which the test does not need.
    env = private_env(tmp_path / "cache", CXX=str(wrapper), JIT_LOADER_PCH="0")
    code = BUILD.format(path=str(op_dir))

    def start():
        return start_python(code, env=env)

    done = threading.Event()
    cleans = []

    def clean_loop():
        while not done.is_set():
            proc = run_cli("clean", "toy_op", env=env, timeout=120)
            cleans.append(proc)
            done.wait(0.5)  # a clean every two seconds or so: several during each phase

    builder = start()
    time.sleep(1.0)
    waiter = start()  # waits on the builder's lock, then is handed the build
    cleaner = threading.Thread(target=clean_loop)
    cleaner.start()
    try:
        outs = [wait_for(p, timeout=TIMEOUT) for p in (builder, waiter)]
    finally:
        done.set()
        cleaner.join(timeout=300)
        for p in (builder, waiter):
            p.kill()
    results = [json_result(out) for out in outs]
    # One process compiled and the other was handed its build, which was there; which one
    # takes the build lock first is up to the scheduler (each first imports torch).
    assert sorted(r["compiled"] for r in results) == [False, True], results
    assert all(r["y"] == [2.0, 2.0] for r in results), results
    assert cleans and all(c.returncode == 0 for c in cleans), [(c.returncode, c.stdout, c.stderr) for c in cleans if c.returncode]
    assert any("building toy_op now" in c.stdout or "loading toy_op now" in c.stdout
               for c in cleans), [c.stdout for c in cleans]
