"""The tiny ops of tests/fixtures as the loader's tests use them: a copy in a temporary
folder (``copy_op``), an edit of its constant (``set_factor``), the scripts a new process
loads or edits one with, and what a build leaves to read back (``ninja_log``); and the
planted compile error of a scaffolded CUDA op's kernel (``plant_undeclared``).

    op_dir = copy_op("stable_op", tmp_path)
    set_factor(op_dir, 3.0)
    r = json_result(run_python(LOAD, op_dir, env=private_env(tmp_path / "cache")))
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The shared build pieces (precompiled headers, the gold linker, ccache) turned off, for
# tests of the cache's own bookkeeping whose processes would otherwise build the pieces
# too, which proves nothing there.
NO_PIECES = {"JIT_LOADER_PCH": "0", "JIT_LOADER_GOLD": "0", "JIT_LOADER_CCACHE": "0",
             "JIT_LOADER_SHARED_NOW": "0"}

# toy_op from the folder given (formatted in as ``path``, or sys.argv[1]): whether it
# compiled, its key and toy_op.scale(ones(3)), as JSON.
LOAD_AND_SCALE = """
    import json, sys, torch, jit_loader
    op = jit_loader.load(sys.argv[1] if len(sys.argv) > 1 else {path!r})
    y = torch.ops.toy_op.scale(torch.ones(3))
    print(json.dumps({{"compiled": op.build.compiled, "key": op.build.key, "y": y.tolist()}}))
"""

# stable_op from the folder sys.argv[1]: the same, and where the build came from.
LOAD = """
    import json, sys, torch, jit_loader
    op = jit_loader.load(sys.argv[1])
    y = torch.ops.stable_op.scale(torch.ones(3))
    print(json.dumps({"compiled": op.build.compiled, "key": op.build.key, "y": y.tolist(),
                      "origin": op.build.origin}))
"""

# The start of a script that edits an op folder in a new process (a test's own lines
# follow it; format in the folder as ``path``): ``op_dir``, the dict ``out`` it prints as
# JSON at its end, and ``first_line_of_reload()``, "loaded" or the first line of the error
# a new load of the op raises.
EDIT_SCRIPT = """
    import json, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    out = {{}}

    def first_line_of_reload():
        try:
            jit_loader.load(op_dir)
            return "loaded"
        except jit_loader.JitLoaderError as e:
            return str(e).splitlines()[0]
"""

# The statement of a scaffolded elementwise op's forward kernel (its <name>_cuda.cu).
FORWARD_BODY = "y[i] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));"


def copy_op(name: str, dest: Path) -> Path:
    """A copy of the fixture op ``name`` at ``dest/name``."""
    target = dest / name
    shutil.copytree(FIXTURES / name, target)
    return target


def set_factor(op_dir: Path, value: float) -> None:
    """Set the ``kFactor`` constant of a copied toy_op or stable_op (its ``<name>.h``)."""
    header = op_dir / f"{op_dir.name}.h"
    text, count = re.subn(r"kFactor = [0-9.]+(f?);", rf"kFactor = {value}\g<1>;", header.read_text())
    assert count == 1, header
    header.write_text(text)


def ninja_log(cache: Path, name: str) -> str:
    """The Ninja log of the one build of ``name`` in ``cache``."""
    logs = list((cache / name).glob("work-*/.ninja_log"))
    assert len(logs) == 1, logs
    return logs[0].read_text()


def plant_undeclared(cu: Path) -> tuple[str, str]:
    """Replace the forward statement of a scaffolded op's kernel file ``cu`` by one that
    names an undeclared variable. Returns the text before the edit and the place the
    compiler's first error line must start with (``"<cu>:<line>: "``)."""
    text = cu.read_text()
    line = text[:text.index(FORWARD_BODY)].count("\n") + 1
    cu.write_text(text.replace(FORWARD_BODY, "y[i] = not_declared_here;"))
    return text, f"{cu}:{line}: "
