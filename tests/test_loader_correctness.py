"""A published build is always compiled from exactly the contents its key names, and the
cache stays healthy: edits during a compile, files restored with old timestamps,
corrupted libraries, odd cache paths, a stopped builder, bad settings.

Like test_jit_loader.py, every scenario runs real builds of the tiny fixture ops in
fresh processes against a private cache.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

import pytest

from jit_tools.builder import toolchain
from subproc import json_result, private_env, run_cli, run_interpreter, run_python, start_python
from toy_ops import EDIT_SCRIPT, LOAD_AND_SCALE, copy_op, ninja_log, set_factor


def load_scale(op_dir: Path, env: dict) -> dict:
    return json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env))


def test_file_restored_with_an_old_mtime_is_rebuilt(tmp_path):
    """cp -p / git stash put back a header older than the objects: Ninja alone would
    keep the object of the previous content and publish it under the new key."""
    op_dir = copy_op("toy_op", tmp_path)
    env = private_env(tmp_path / "cache")
    header = op_dir / "toy_op.h"
    old = os.stat(header)
    assert load_scale(op_dir, env)["y"] == [2.0] * 3

    set_factor(op_dir, 5.0)
    assert load_scale(op_dir, env)["y"] == [5.0] * 3

    set_factor(op_dir, 7.0)  # a version never built, restored with an old timestamp
    os.utime(header, ns=(old.st_atime_ns, old.st_mtime_ns))
    r = load_scale(op_dir, env)
    assert r["compiled"] is True
    assert r["y"] == [7.0] * 3

    os.utime(header)  # touching it changes nothing: same content, same build
    r = load_scale(op_dir, env)
    assert r["compiled"] is False and r["y"] == [7.0] * 3


WRAPPER = """#!/bin/sh
# A compiler that edits the op's header just before it compiles the op's source, the
# first time only: an edit that lands while the build is under way.
case "$*" in
  *toy_op.cpp*)
    if [ ! -e "{mark}" ]; then
      : > "{mark}"
      sed -i 's/kFactor = 2.0;/kFactor = 3.0;/' "{header}"
    fi ;;
esac
exec c++ "$@"
"""


def test_edit_during_the_build_is_never_published_under_the_old_key(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    header = op_dir / "toy_op.h"
    wrapper = tmp_path / "cxx-wrapper"
    wrapper.write_text(WRAPPER.format(mark=tmp_path / "edited", header=header))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = private_env(tmp_path / "cache", CXX=str(wrapper))

    first = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
    r = json_result(first)
    # The loader noticed the edit, built the sources as they now are, and runs them.
    assert "kFactor = 3.0" in header.read_text()
    assert r["y"] == [3.0] * 3

    set_factor(op_dir, 2.0)  # restore the original content
    r = load_scale(op_dir, env)
    assert r["y"] == [2.0] * 3, "a build of the edited code was published under the original key"


SILENT_WRAPPER = """#!/bin/sh
# A compiler that fails without a word on the op's source ({times}): as one killed, or
# out of memory, does.
case "$*" in
  *toy_op.cpp*)
    if [ "{times}" = always ] || [ ! -e "{mark}" ]; then
      : > "{mark}"
      exit 1
    fi ;;
esac
exec c++ "$@"
"""


@pytest.mark.parametrize("times", ["once", "always"])
def test_a_step_that_fails_without_a_word_is_run_once_more_then_reported_as_silent(tmp_path, times):
    op_dir = copy_op("toy_op", tmp_path)
    wrapper = tmp_path / "cxx-wrapper"
    wrapper.write_text(SILENT_WRAPPER.format(mark=tmp_path / "failed", times=times))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = private_env(tmp_path / "cache", CXX=str(wrapper), JIT_LOADER_PCH="0")
    proc = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
    assert "toy_op.o failed and printed nothing" in proc.stderr, proc.stderr
    if times == "once":  # the second run redid the step, and the op runs
        assert json_result(proc)["y"] == [2.0] * 3
    else:
        assert proc.returncode != 0
        assert ("toy_op.o: the step exited with status 1 and printed nothing, twice"
                in proc.stderr), proc.stderr


def test_ninja_comes_from_the_python_environment():
    ninja_package = pytest.importorskip("ninja")
    found = toolchain.ninja()
    assert os.path.dirname(found) == os.path.realpath(ninja_package.BIN_DIR) or \
        os.path.dirname(found) == ninja_package.BIN_DIR


def _only_library(cache: Path, name: str) -> Path:
    libs = list((cache / name / "builds").glob(f"*/{name}.so"))
    assert len(libs) == 1, libs
    return libs[0]


def test_library_corrupted_in_place_is_detected_and_rebuilt(tmp_path):
    """Bytes changed, size and modification time kept: the next load in a new process
    notices (the file's ctime moved, so it re-hashes) and rebuilds instead of crashing;
    doctor and list --verify name the corrupt build."""
    op_dir = copy_op("toy_op", tmp_path)
    cache = tmp_path / "cache"
    env = private_env(cache)
    assert load_scale(op_dir, env)["compiled"] is True
    assert load_scale(op_dir, env)["compiled"] is False  # verified once, then a stat

    lib = _only_library(cache, "toy_op")
    st = os.stat(lib)
    data = bytearray(lib.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 256] = b"\xcc" * 256  # int3 over whatever code lies there
    lib.write_bytes(bytes(data))
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(lib).st_size == st.st_size

    listing = run_cli("list", "--verify", op_dir, env=env, timeout=300)
    assert listing.returncode == 0, listing.stderr
    assert "BROKEN" in listing.stdout and "sha256" in listing.stdout, listing.stdout
    doctor = run_cli("doctor", env=env, timeout=300)
    assert "corrupt" in doctor.stdout, doctor.stdout

    r = load_scale(op_dir, env)
    assert r["compiled"] is True and r["y"] == [2.0] * 3
    assert load_scale(op_dir, env)["compiled"] is False


def test_relative_cache_path_and_paths_with_spaces(tmp_path):
    """JIT_LOADER_CACHE relative to the working directory, and spaces in the cache and op
    folder paths: the flags that name them reach a shell, so they are quoted."""
    work = tmp_path / "my project"
    work.mkdir()
    op_dir = copy_op("toy_op", work)
    env = private_env(Path("build cache"))  # relative, with a space
    r = json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env, cwd=work))
    assert r["compiled"] is True and r["y"] == [2.0] * 3
    assert list((work / "build cache" / "toy_op" / "builds").glob("*/toy_op.so"))


LOCK_HOLDER = """
import fcntl, os, signal, sys, time
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, f"{os.getpid()} {time.time() - 120:.0f}".encode(), 0)
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # a builder stopped with Ctrl-Z
"""


def test_waiting_on_a_stopped_builder_says_who_and_times_out(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    cache = tmp_path / "cache"
    holder = start_python(LOCK_HOLDER, cache / "toy_op" / "build.lock", stderr=None)
    try:
        assert holder.stdout.readline().strip() == "locked"
        env = private_env(cache, JIT_LOADER_LOCK_TIMEOUT="3")
        started = time.time()
        proc = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env, timeout=300)
        assert proc.returncode != 0
        assert time.time() - started < 120
        assert f"waiting for process {holder.pid}" in proc.stderr
        assert "since" in proc.stderr and "s ago" in proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert f"gave up after 3 s waiting for process {holder.pid}" in last, proc.stderr
        assert f"kill -CONT {holder.pid}" in last
    finally:
        holder.kill()
        holder.wait()

    bad = run_python(LOAD_AND_SCALE.format(path=str(op_dir)),
                     env=private_env(cache, JIT_LOADER_LOCK_TIMEOUT="soon"))
    assert bad.returncode != 0 and "JIT_LOADER_LOCK_TIMEOUT='soon' is not a number" in bad.stderr


def test_max_jobs_is_validated(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    proc = run_python(LOAD_AND_SCALE.format(path=str(op_dir)),
                      env=private_env(tmp_path / "cache", MAX_JOBS="abc"))
    assert proc.returncode != 0
    assert "MAX_JOBS='abc' is not a positive whole number" in proc.stderr


SURFACE = '''
import torch
import jit_loader

jit_loader.load_library(__file__)
LIB = torch.library.Library("toy_op", "FRAGMENT")
VERSION = {version}


def _setup(ctx, inputs, output):
    pass


def _backward(ctx, grad):
    return grad * {grad_factor}


torch.library.register_autograd("toy_op::scale", _backward, setup_context=_setup, lib=LIB)
{tail}
'''

FAILED_SURFACE = """
    import json, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    surface = op_dir / "toy_op.py"
    out = {{}}

    def grad_of_scale():
        x = torch.ones(2, requires_grad=True)
        torch.ops.toy_op.scale(x).sum().backward()
        return x.grad.tolist()

    op = jit_loader.load(op_dir)
    out["v1"] = [op.VERSION, grad_of_scale()]
    surface.write_text({broken!r})
    for attempt in ("first", "second"):
        try:
            jit_loader.load(op_dir)
            out[attempt] = "no error"
        except ZeroDivisionError:
            out[attempt] = "raised"
    # the failed import's autograd registration is withdrawn; the last good one is back
    out["while_broken"] = [op.VERSION, grad_of_scale()]
    surface.write_text({fixed!r})
    jit_loader.load(op_dir)
    out["fixed"] = [op.VERSION, grad_of_scale()]
    print(json.dumps(out))
"""


def test_a_surface_that_fails_to_import_stays_broken_and_leaves_nothing(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    (op_dir / "toy_op.py").write_text(SURFACE.format(version=1, grad_factor=2, tail=""))
    broken = SURFACE.format(version=2, grad_factor=100, tail="1 / 0")
    fixed = SURFACE.format(version=3, grad_factor=3, tail="")
    r = json_result(run_python(FAILED_SURFACE.format(path=str(op_dir), broken=broken, fixed=fixed),
                               cache=tmp_path / "cache"))
    assert r["v1"] == [1, [2.0, 2.0]]
    assert r["first"] == "raised" and r["second"] == "raised"
    assert r["while_broken"] == [1, [2.0, 2.0]]
    assert r["fixed"] == [3, [3.0, 3.0]]


UNDEFINED = """
    import json, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    out = []
    for attempt in range(2):
        try:
            jit_loader.load(op_dir)
            out.append("loaded")
        except jit_loader.BuildError as e:
            out.append(str(e))
    print(json.dumps(out))
"""


def test_undefined_symbol_is_a_build_error_naming_it_and_not_retried(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    source = op_dir / "toy_op.cpp"
    source.write_text(source.read_text().replace(
        "at::Tensor scale_cpu(const at::Tensor& x) {",
        "at::Tensor helper(const at::Tensor& x, int times);  // declared, never defined\n\n"
        "at::Tensor scale_cpu(const at::Tensor& x) {\n  if (x.numel() < 0) return helper(x, 2);"))
    cache = tmp_path / "cache"
    r = json_result(run_python(UNDEFINED.format(path=str(op_dir)), cache=cache))
    first = r[0].splitlines()[0]
    assert first == "toy_op: undefined symbol helper(at::Tensor const&, int)", r[0]
    assert "toy_op.cpp" in r[0]
    assert r[1].splitlines()[0] == first
    # Neither the second attempt nor a new process compiles again while nothing changed.
    log = ninja_log(cache, "toy_op")
    r2 = json_result(run_python(UNDEFINED.format(path=str(op_dir)), cache=cache))
    assert r2[0].splitlines()[0] == first
    assert ninja_log(cache, "toy_op") == log


DISPATCHER_REFUSALS = EDIT_SCRIPT + """
    import shutil
    source = op_dir / "toy_op.cpp"
    original = source.read_text()
    jit_loader.load(op_dir)
    source.write_text(original
        .replace('m.def("scale(Tensor x) -> Tensor");', 'm.def("scale(Tensor x, float f=1.0) -> Tensor");')
        .replace("at::Tensor scale_cpu(const at::Tensor& x) {{", "at::Tensor scale_cpu(const at::Tensor& x, double f) {{"))
    out["schema"] = first_line_of_reload()
    out["new_build_runs"] = torch.ops.toy_op.scale(torch.ones(2)).tolist()

    source.write_text(original.replace('m.impl("scale", &scale_cpu);',
                                       'm.impl("scale", &scale_cpu);\\n  m.impl("scael", &scale_cpu);'))
    out["dangling"] = first_line_of_reload()
    out["still_runs"] = torch.ops.toy_op.scale(torch.ones(2)).tolist()

    source.write_text(original)
    jit_loader.load(op_dir)
    twin = op_dir.parent / "elsewhere" / "toy_op"
    shutil.copytree(op_dir, twin)
    (twin / "toy_op.h").write_text((twin / "toy_op.h").read_text().replace("2.0", "4.0"))
    try:
        jit_loader.load(twin)
        out["twin"] = "loaded"
    except jit_loader.JitLoaderError as e:
        out["twin"] = str(e).splitlines()[0]
    print(json.dumps(out))
"""


def test_dispatcher_refusals_are_explained_in_one_line(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    r = json_result(run_python(DISPATCHER_REFUSALS.format(path=str(op_dir)), cache=tmp_path / "cache"))
    assert r["schema"] == "loaded"  # a schema change reloads live (test_reload_edges.py)
    assert r["new_build_runs"] == [2.0, 2.0]  # the new build, its f=1.0 default
    assert "toy_op::scael" in r["dangling"] and "no m.def declares" in r["dangling"], r["dangling"]
    assert r["still_runs"] == [2.0, 2.0]
    assert "registers the namespace 'toy_op', which the op loaded from" in r["twin"], r["twin"]
    assert str(op_dir) in r["twin"]


BROKEN_BUILD = """
    import json, jit_loader
    try:
        jit_loader.load({path!r})
        print(json.dumps("loaded"))
    except jit_loader.BuildError as e:
        print(json.dumps(str(e)))
"""


def test_failed_build_report_hint_and_progress_total(tmp_path):
    """The BuildError shows the compiler's words, not its command line twice; the bar
    knows its total from the start; a misnamed Python surface gets a hint."""
    op_dir = copy_op("toy_op", tmp_path)
    source = op_dir / "toy_op.cpp"
    source.write_text(source.read_text().replace("return x * kFactor;", "return x * kFactr;"))
    (op_dir / "toy.py").write_text("VERSION = 1\n")
    proc = run_python(BROKEN_BUILD.format(path=str(op_dir)), cache=tmp_path / "cache")
    message = json_result(proc)
    assert message.splitlines()[0].startswith(f"{source}:")
    assert "kFactr" in message.splitlines()[0]
    assert message.count(f"-c {source}") == 0, message
    assert "has toy.py but no toy_op.py" in proc.stderr
    # Every step of build.ninja (the op's units and the link).
    ninja = next((tmp_path / "cache" / "toy_op").glob("work-*/build.ninja")).read_text()
    steps = len(re.findall(r"^build ", ninja, flags=re.M))
    assert steps >= 2 and f"0/{steps}" in proc.stderr and "0/1 " not in proc.stderr, proc.stderr


def test_doctor_gives_one_verdict_for_a_cuda_home_without_nvcc(tmp_path):
    env = private_env(tmp_path / "cache", CUDA_HOME=str(tmp_path / "nowhere"))
    proc = run_cli("doctor", env=env, timeout=300)
    assert proc.returncode != 0
    assert "has no bin/nvcc" in proc.stdout
    assert "still compiled" not in proc.stdout, proc.stdout


REFERENCE = '''
import torch


def check_cases(device):
    if device != "cpu":
        return {{}}  # the toy op has a CPU kernel only
    # No autograd and no fake kernel: the reference comparison alone.
    return {{"scale": dict(fn="scale", inputs=(torch.randn(5, device=device),),
                          reference=lambda x: {factor} * x, dtypes=(torch.float32,),
                          gradcheck=False, opcheck=False, compile_backend=None)}}
'''


def test_run_all_checks_out_of_tree_ops_and_fails_without_a_reference(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    env = private_env(tmp_path / "cache")
    cmd = ["-m", "experiments.run_all", "--no-bench", "--ops", op_dir]
    missing = run_interpreter(*cmd, env=env)
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert "SOME CHECKS FAILED" in missing.stderr and "reference.py" in missing.stderr

    (op_dir / "reference.py").write_text(REFERENCE.format(factor=2.0))
    good = run_interpreter(*cmd, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "all checks passed" in good.stdout

    (op_dir / "reference.py").write_text(REFERENCE.format(factor=3.0))  # a reference that disagrees
    bad = run_interpreter(*cmd, env=env)
    assert bad.returncode == 1 and "SOME CHECKS FAILED" in bad.stderr


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_prebuilt_read_only_first_layer(tmp_path):
    """A cache built ahead of time (a login node's ``python -m jit_loader build``) is the
    first entry of JIT_LOADER_CACHE: loads find their builds there and never write to it;
    builds it lacks go to the last (node-local) entry."""
    op_dir = copy_op("toy_op", tmp_path)
    prebuilt, local = tmp_path / "prebuilt", tmp_path / "local"
    first = run_cli("build", op_dir, env=private_env(prebuilt))
    assert first.returncode == 0, first.stdout + first.stderr
    before = _tree(prebuilt)
    env = private_env(Path(f"{prebuilt}{os.pathsep}{local}"))

    r = load_scale(op_dir, env)
    assert r["compiled"] is False and r["y"] == [2.0] * 3
    set_factor(op_dir, 6.0)  # not prebuilt: compiled into the node-local layer
    r = load_scale(op_dir, env)
    assert r["compiled"] is True and r["y"] == [6.0] * 3
    assert _tree(prebuilt) == before
    assert list((local / "toy_op" / "builds").glob("*/toy_op.so"))


SHARED_HEADER = {
    "semi.h": "#pragma once\ninline float semi_scale(float x) {\n  float y;\n  y = x * 2.0f\n  return y;\n}\n",
    "semi.cpp": ('#include <torch/csrc/stable/library.h>\n#include <torch/csrc/stable/tensor.h>\n'
                 '#include "semi.h"\nusing torch::stable::Tensor;\n'
                 "Tensor ident(const Tensor& x) { return x; }\n"
                 'STABLE_TORCH_LIBRARY(semi, m) { m.def("ident(Tensor x) -> Tensor"); }\n'
                 'STABLE_TORCH_LIBRARY_IMPL(semi, CPU, m) { m.impl("ident", TORCH_BOX(&ident)); }\n'),
    "semi_cuda.cu": ('#include <cuda_runtime.h>\n#include "semi.h"\n'
                     "__global__ void twice(float* y) { y[0] = semi_scale(y[0]); }\n"),
}


@pytest.mark.skipif(toolchain.why_no_cuda() is not None, reason="CUDA sources are not built here")
def test_an_error_in_a_shared_header_is_reported_at_the_exact_line(tmp_path):
    """g++ and nvcc both compile a header that .cpp and .cu units share; nvcc's front end
    puts a missing ';' on the next line. The first line names the line of the mistake,
    whichever compiler Ninja heard first."""
    op_dir = tmp_path / "semi"
    op_dir.mkdir()
    for name, text in SHARED_HEADER.items():
        (op_dir / name).write_text(text)
    message = json_result(run_python(BROKEN_BUILD.format(path=str(op_dir)), cache=tmp_path / "cache"))
    assert message.splitlines()[0] == f"{op_dir / 'semi.h'}:4: expected ‘;’ before ‘return’", message
    assert f"{op_dir / 'semi.h'}(5): error: expected a \";\"" in message  # nvcc's, in the tail


def test_the_earliest_line_of_the_first_file_wins_whichever_compiler_came_first(tmp_path):
    """The log order of the real build above is a race: here nvcc's report comes first."""
    from jit_tools.builder import ninja

    header = tmp_path / "semi.h"
    log = (f"FAILED: [code=2] semi_cuda.cuda.o\n{header}(5): error: expected a \";\"\n"
           f"FAILED: [code=1] semi.o\nIn file included from {tmp_path}/semi.cpp:3:\n"
           f"{header}:4:15: error: expected ‘;’ before ‘return’\n"
           f"{tmp_path}/other.h:2:1: error: an error in another file, later\n")
    assert ninja.first_error(log, [tmp_path]) == (str(header), 4, "expected ‘;’ before ‘return’")
    outside = "/usr/include/x.h:1:1: error: not the user's\n"
    assert ninja.first_error(outside + log, [tmp_path])[1] == 4
    assert ninja.first_error(outside, [tmp_path]) == ("/usr/include/x.h", 1, "not the user's")
