"""torch.compile across live reloads: code compiled against an op, calling it through its
handle (``op = jit_loader.load(...)``, then ``op.scale(x)``, as the README shows), its
Python module or ``torch.ops``, keeps running after every kind of reload (a native edit,
a Python-only edit of the surface, a schema change): it recompiles where it must and never
raises, and so does compiling it anew after ``torch.compiler.reset()``. Functions taken
from the handle before a reload call the new code, the new signature included.

One process (on the CPU) builds a tiny stable-ABI op with a Python surface in a private
cache and goes through the three reloads in turn.
"""

from __future__ import annotations

from subproc import json_result, private_env, run_python
from toy_ops import copy_op

SURFACE = '''
import torch, jit_loader
jit_loader.load_library(__file__)
LIB = torch.library.Library("stable_op", "FRAGMENT")

@torch.library.register_fake("stable_op::scale", lib=LIB)
def _(x, *args):
    return torch.empty_like(x)

def scale(x):
    return torch.ops.stable_op.scale(x)
'''

SCENARIO = """
    import json, re, sys, torch, jit_loader
    from pathlib import Path
    op_dir = Path(sys.argv[1])
    op = jit_loader.load(op_dir)
    module = op.module

    def through_handle(x):
        return op.scale(x) + 1

    def through_module(x):
        return module.scale(x) + 1

    def through_torch_ops(x):
        return torch.ops.stable_op.scale(x) + 1

    ways = {"handle": through_handle, "module": through_module, "torch.ops": through_torch_ops}
    compiled = {name: torch.compile(fn, fullgraph=True) for name, fn in ways.items()}
    x = torch.ones(3)
    taken = op.scale  # a function handed out before the reloads
    out = {"before": {name: fn(x).tolist() for name, fn in compiled.items()}}

    def run(label):
        result = {}
        for name in ways:
            try:
                result[name] = compiled[name](x).tolist()
            except Exception as e:  # noqa: BLE001 - recorded for the assertion
                result[name] = f"{type(e).__name__}: {e}".splitlines()[0]
        torch.compiler.reset()  # and compiled anew
        for name, fn in ways.items():
            compiled[name] = torch.compile(fn, fullgraph=True)
            try:
                result[name + " recompiled"] = compiled[name](x).tolist()
            except Exception as e:  # noqa: BLE001
                result[name + " recompiled"] = f"{type(e).__name__}: {e}".splitlines()[0]
        result["taken"] = taken(x).tolist()
        result["same module"] = op.module is module
        out[label] = result

    def edit(path, old, new):
        text = path.read_text()
        assert old in text, (path, old)
        path.write_text(text.replace(old, new))

    def schema_change(label, edits):
        for path, old, new in edits:
            edit(path, old, new)
        assert op.reload() and op.build.compiled
        run(label)

    # A native edit: the factor of the C++ kernel, 2 -> 3.
    edit(op_dir / "stable_op.h", "kFactor = 2.0f", "kFactor = 3.0f")
    assert op.reload() and op.build.compiled
    run("native")
    # A Python-only edit of the surface.
    key = op.build.key
    edit(op_dir / "stable_op.py", "return torch.ops.stable_op.scale(x)",
         "return torch.ops.stable_op.scale(x) * 2")
    assert op.reload() and op.build.key == key
    run("python")
    # A schema change: a new argument with a default, which the surface passes.
    cpp, py = op_dir / "stable_op.cpp", op_dir / "stable_op.py"
    schema_change("schema", [
        (cpp, "Tensor scale_cpu(const Tensor& x) {", "Tensor scale_cpu(const Tensor& x, double k) {"),
        (cpp, "dst[i] = src[i] * kFactor;", "dst[i] = src[i] * kFactor * static_cast<float>(k);"),
        (cpp, '"scale(Tensor x) -> Tensor"', '"scale(Tensor x, float k=1.0) -> Tensor"'),
        (py, "def scale(x):", "def scale(x, k=5.0):"),
        (py, "torch.ops.stable_op.scale(x) * 2", "torch.ops.stable_op.scale(x, k)")])
    out["schema"]["taken with the new argument"] = taken(x, 0.5).tolist()
    # Another one, now that torch.compile has seen the op with a float argument.
    schema_change("schema again", [
        (cpp, "const Tensor& x, double k) {", "const Tensor& x, double k, double b) {"),
        (cpp, "static_cast<float>(k);", "static_cast<float>(k) + static_cast<float>(b);"),
        (cpp, '"scale(Tensor x, float k=1.0) -> Tensor"', '"scale(Tensor x, float k=1.0, float b=0.0) -> Tensor"'),
        (py, "def scale(x, k=5.0):", "def scale(x, k=5.0, b=1.0):"),
        (py, "torch.ops.stable_op.scale(x, k)", "torch.ops.stable_op.scale(x, k, b)")])
    print(json.dumps(out))
"""


def test_compiled_code_survives_every_reload(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    (op_dir / "stable_op.py").write_text(SURFACE)
    r = json_result(run_python(SCENARIO, op_dir, env=private_env(tmp_path / "cache")))
    assert r["before"] == {"handle": [3.0] * 3, "module": [3.0] * 3, "torch.ops": [3.0] * 3}
    expected = {
        # x * 3 (+ 1 in the compiled function)
        "native": {"handle": 4.0, "module": 4.0, "torch.ops": 4.0, "taken": 3.0},
        # the surface doubles it; torch.ops is the op itself
        "python": {"handle": 7.0, "module": 7.0, "torch.ops": 4.0, "taken": 6.0},
        # the surface's default k = 5; the op's default k = 1
        "schema": {"handle": 16.0, "module": 16.0, "torch.ops": 4.0, "taken": 15.0},
        # and b = 1 (the op's default b = 0)
        "schema again": {"handle": 17.0, "module": 17.0, "torch.ops": 4.0, "taken": 16.0},
    }
    for label, want in expected.items():
        got = r[label]
        assert got["same module"], (label, got)
        for way, value in want.items():
            assert got[way] == [value] * 3, (label, way, got)
            if way != "taken":
                assert got[way + " recompiled"] == [value] * 3, (label, way, got)
    assert r["schema"]["taken with the new argument"] == [1.5] * 3
