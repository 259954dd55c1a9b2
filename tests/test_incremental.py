"""Ninja stays incremental (loader contract 5) where the loader itself changes what a build
sees: when the shared build pieces appear between two builds of a work folder, and when
a background build of one key (the Ninja build that follows a kernel swap) meets an edit
of another unit. Each scenario counts the compiler runs in the work folder's Ninja log.
"""

from __future__ import annotations

import json

import pytest

import jit_loader
from jit_tools.builder import toolchain
from jit_tools.tools import scaffold
from subproc import json_result, private_env, run_python
from toy_ops import copy_op

CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None

# The outputs Ninja built in a work folder since a mark (the log's line count), one list per
# load; the log is read after each load in the same process.
BUILT = """
    def built(cache, name, mark=[0]):
        (log,) = (cache / name).glob("work-*/.ninja_log")
        lines = log.read_text().splitlines()[1:]
        out, mark[0] = [l.split("\\t")[3] for l in lines[mark[0]:]], len(lines)
        return sorted(out)
"""

EDIT_AFTER_THE_PIECES = BUILT + """
    import json, os, sys, time, torch, jit_loader
    from pathlib import Path
    from jit_tools.store import CacheStore
    op_dir, cache = Path(sys.argv[1]), Path(os.environ["JIT_LOADER_CACHE"])
    op = jit_loader.load(op_dir)
    manifest = json.loads((Path(op.library).parent / "manifest.json").read_text())
    out = {"first": built(cache, "stable_op"), "later": manifest["shared"].get("later", [])}
    shared_dir = CacheStore(cache).shared_folder()
    deadline = time.monotonic() + 600
    while not all((shared_dir / n / "ok").exists() or (shared_dir / n / "FAILED").exists()
                  for n in out["later"]):
        assert time.monotonic() < deadline, "the background build of the pieces did not finish"
        time.sleep(0.5)
    helper = op_dir / "helper.cpp"
    helper.write_text(helper.read_text() + "int stable_op_helper_2() { return 2; }\\n")
    op.reload()
    out["edit"] = built(cache, "stable_op")
    out["y"] = torch.ops.stable_op.scale(torch.ones(2)).tolist()
    print(json.dumps(out))
"""


@pytest.mark.skipif(not toolchain.is_gcc("c++"), reason="GCC's precompiled headers")
def test_the_first_edit_after_the_pieces_exist_compiles_the_edited_unit_only(tmp_path):
    """A new cache: the op's first build goes without its flag set's pieces (precompiled
    header, ccache), which a background process then builds. The next edit uses them and
    compiles the edited unit alone: the other unit's object, compiled without the header,
    is the same object, so its changed command line must not recompile it."""
    op_dir = copy_op("stable_op", tmp_path)
    (op_dir / "helper.cpp").write_text("int stable_op_helper() { return 1; }\n")
    env = private_env(tmp_path / "cache", JIT_LOADER_SHARED_NOW="0", JIT_LOADER_SHARED_DIR=None)
    r = json_result(run_python(EDIT_AFTER_THE_PIECES, op_dir, env=env))
    assert r["first"] == ["helper.o", "stable_op.o", "stable_op.so"], r
    assert any(n.startswith("pch-") for n in r["later"]), r
    assert r["edit"] == ["helper.o", "stable_op.so"], r
    assert r["y"] == [2.0, 2.0]
    keys = [p.name for p in (tmp_path / "cache" / "stable_op" / "builds").iterdir()]
    manifests = [json.loads((tmp_path / "cache" / "stable_op" / "builds" / k / "manifest.json")
                            .read_text())["shared"] for k in keys]
    # ... and that edit did use them.
    assert sorted(m["pch"] for m in manifests) == [False, True], manifests


BACKGROUND_THEN_EDIT = BUILT + """
    import json, os, sys, torch, jit_loader
    from pathlib import Path
    from jit_tools import key as keys, store as stores
    from jit_tools.swap import hotswap
    op_dir, name = Path(sys.argv[1]), sys.argv[2]
    cache = Path(os.environ["JIT_LOADER_CACHE"])
    cu, cpp = op_dir / f"{name}_cuda.cu", op_dir / f"{name}.cpp"
    op = jit_loader.load(op_dir)
    state, out = op._state, {"first": built(cache, name)}

    def append(path, n):
        path.write_text(path.read_text() + f"\\nint jit_edit_{path.stem}_{n}() {{ return {n}; }}\\n")

    def background():  # the build a kernel swap starts for the new key, without activating it
        key, config, compiled, inputs = keys.compute_key(name, op_dir, state.options)
        hotswap.build_later(state, key, config, compiled, inputs)
        hotswap.wait_for_background(state, 600)
        return key

    append(cu, 1)
    key = background()
    out["background"] = built(cache, name)
    out["published"] = (cache / name / "builds" / key / "manifest.json").is_file()
    append(cpp, 1)
    op.reload()
    out["cpp edit"] = built(cache, name)
    # An edit that overtakes the background build: written while that build waits for
    # the op's build lock (held here as another build would hold it).
    append(cu, 2)
    key, config, compiled, inputs = keys.compute_key(name, op_dir, state.options)
    with stores.current().build_lock(name):
        hotswap.build_later(state, key, config, compiled, inputs)
        append(cpp, 2)
    hotswap.wait_for_background(state, 600)
    out["overtaken published"] = (cache / name / "builds" / key / "manifest.json").is_file()
    out["overtaken background"] = built(cache, name)
    op.reload()
    out["edit after it"] = built(cache, name)
    out["y"] = getattr(op, name)(torch.full((3,), -2.0)).tolist()
    print(json.dumps(out))
"""


@pytest.mark.skipif(not CAN_BUILD_CUDA, reason="CUDA sources are not built here")
def test_a_cpp_edit_after_a_background_build_of_a_cu_edit_compiles_the_cpp_only(tmp_path):
    """The .cu edit's build runs in the background (as after a kernel swap); a .cpp edit
    then compiles the .cpp and links: the .cu object is the background build's. A build
    whose sources changed before it started compiles nothing: the next build compiles each
    edited unit once."""
    name = "incr_op"
    plan = scaffold.create(name, tmp_path, cuda=True)
    env = private_env(tmp_path / "cache")
    r = json_result(run_python(BACKGROUND_THEN_EDIT, plan.op_dir, name, env=env))
    units = {f"{name}.o", f"{name}_cpu.o", f"{name}_cuda.o", f"{name}_cuda.cuda.o", f"{name}.so"}
    assert set(r["first"]) == units, r
    assert r["background"] == [f"{name}.so", f"{name}_cuda.cuda.o"] and r["published"], r
    assert r["cpp edit"] == [f"{name}.o", f"{name}.so"], r
    assert r["overtaken background"] == [] and not r["overtaken published"], r
    assert r["edit after it"] == [f"{name}.o", f"{name}.so", f"{name}_cuda.cuda.o"], r
    assert r["y"] == [-4.0, -4.0, -4.0]  # the scaffold's x * |x|
