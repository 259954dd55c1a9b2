"""The surfaces of sigmoid and gelu resolve their dispatcher ops once per build, and handles
hold each surface name as a class attribute: neither may keep a caller on an old build. A copy of each op is built (CPU only), its functions and module are taken, its math
is edited, and after ``reload()`` in the same process every one of them runs the new build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jit_loader
from subproc import ROOT, json_result, private_env, run_python

RELOAD = """
    import json, sys
    from pathlib import Path
    import torch, jit_loader

    out = {}
    for name, spec in json.loads(sys.argv[1]).items():
        op_dir = Path(sys.argv[2]) / name
        op = jit_loader.load(str(op_dir))
        x = torch.randn(64, dtype=torch.float64)
        before = getattr(op, name)(x)
        fn = getattr(op, name)                      # handed out before the reload
        # compiled through the handle, as the README shows
        compiled = torch.compile(lambda t: getattr(op, name)(t), fullgraph=True)
        assert torch.equal(compiled(x), before)
        module = getattr(op, spec["module"])()
        function = getattr(op, spec["function"])
        header = op_dir / f"{name}.h"
        header.write_text(header.read_text().replace(*spec["edit"]))
        surface = op_dir / f"{name}.py"             # a name the new surface no longer has
        surface.write_text(surface.read_text().replace(f"class {spec['function']}(",
                                                       f"class {spec['function']}Renamed("))
        assert op.reload()
        x.requires_grad_()
        after = {"old function": fn(x), "old module": module(x),
                 "old autograd.Function": function.apply(x), "handle": getattr(op, name)(x),
                 "dispatcher op": getattr(torch.ops, name).forward(x)}
        after["handle"].sum().backward()
        after["compiled"] = compiled(x.detach())
        torch.compiler.reset()
        after["compiled anew"] = torch.compile(lambda t: getattr(op, name)(t), fullgraph=True)(x.detach())
        out[name] = {
            "shift": {k: (v - before).detach().mean().item() for k, v in after.items()},
            "grad is finite": bool(torch.isfinite(x.grad).all()),
            # the function handed out earlier, its code replaced in place
            "handle gives the same function": getattr(op, name) is fn,
            "removed name": [hasattr(op, spec["function"]), spec["function"] in dir(op)],
            "renamed": hasattr(op, spec["function"] + "Renamed"),
        }
    print(json.dumps(out))
"""

# Each op's forward math shifted by one (unmistakably the new build), and the names of its
# nn.Module and autograd.Function.
OPS = {
    "sigmoid": {"edit": ["return ops_common::sigmoid<kFast>(x);",
                         "return ops_common::sigmoid<kFast>(x) + T(1);"],
                "module": "Sigmoid", "function": "SigmoidFunction"},
    "gelu": {"edit": ["return x * ops_common::sigmoid<kFast>(T(kAlpha) * x);",
                      "return x * ops_common::sigmoid<kFast>(T(kAlpha) * x) + T(1);"],
             "module": "GELU", "function": "GELUFunction"},
}


def test_functions_handles_and_modules_taken_before_a_reload_run_the_new_build(tmp_path):
    ops = tmp_path / "ops"
    for name in OPS:
        shutil.copytree(ROOT / "ops" / name, ops / name,
                        ignore=shutil.ignore_patterns("__pycache__", "_C*"))
    env = private_env(tmp_path / "cache",
                      # the precompiled header of the usual cache: only the op compiles
                      JIT_LOADER_SHARED_DIR=str(Path(jit_loader.cache_dir()) / "_shared"),
                      CUDA_HOME=str(tmp_path / "no_cuda"), JIT_LOADER_PREBUILT="0")
    result = json_result(run_python(RELOAD, json.dumps(OPS), ops, env=env))
    for name in OPS:
        r = result[name]
        for what, shift in r["shift"].items():
            assert abs(shift - 1.0) < 1e-12, (name, what, shift)
        assert r["grad is finite"] and r["handle gives the same function"] and r["renamed"]
        assert r["removed name"] == [False, False]
