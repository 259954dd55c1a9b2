"""The loader contract (README and ARCHITECTURE.md), each point proven with real builds of tiny ops.

Every scenario runs in fresh Python processes against a private cache, because the
contract is about processes: what a new one finds on disk, what a killed one leaves
behind, what several at once do.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time

import pytest

import jit_loader
from jit_tools.state import forget
from subproc import json_result, private_env, run_python, start_python, wait_for
from toy_ops import EDIT_SCRIPT, LOAD_AND_SCALE, copy_op, ninja_log, set_factor

HAS_NVCC = jit_loader.cuda_home() is not None and jit_loader.why_no_cuda() is None


# --------------------------------------------------------------------------------------
# 1, 10: build once, then a new process loads from disk without a compiler, quietly.
# --------------------------------------------------------------------------------------


def test_new_process_hits_cache_without_compiler(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    cache = tmp_path / "cache"
    env = private_env(cache)

    first = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
    r1 = json_result(first)
    assert r1["compiled"] is True
    assert r1["y"] == [2.0, 2.0, 2.0]
    assert "building toy_op" in first.stderr  # visible progress during a real build

    log_before = ninja_log(cache, "toy_op")
    started = time.time()
    second = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
    r2 = json_result(second)
    assert r2 == {**r1, "compiled": False}
    assert ninja_log(cache, "toy_op") == log_before  # Ninja never ran
    assert second.stderr.strip() == ""  # quiet on a cache hit
    assert time.time() - started < 60


# --------------------------------------------------------------------------------------
# 2, 3, 4, 6: edit / revert / compile error / recovery inside ONE live process.
# --------------------------------------------------------------------------------------

IN_PROCESS_EDITS = EDIT_SCRIPT + """
    header, source = op_dir / "toy_op.h", op_dir / "toy_op.cpp"
    ones = torch.ones(2)
    op = jit_loader.load(op_dir)
    held = torch.ops.toy_op.scale.default      # a wrapper handed out before any edit
    out["initial"] = held(ones).tolist()

    original_header = header.read_text()
    header.write_text(original_header.replace("kFactor = 2.0", "kFactor = 5.0"))
    out["edit_reloaded"] = op.reload()
    out["edit_compiled"] = op.build.compiled
    out["held_after_edit"] = held(ones).tolist()
    out["fresh_after_edit"] = op.scale(ones).tolist()

    header.write_text(original_header)
    out["revert_reloaded"] = op.reload()
    out["revert_compiled"] = op.build.compiled
    out["held_after_revert"] = held(ones).tolist()

    original_source = source.read_text()
    lines = original_source.splitlines()
    bad_line = next(i for i, l in enumerate(lines, 1) if "return x * kFactor" in l)
    source.write_text(original_source.replace("return x * kFactor;", "return x * kFactr;"))
    try:
        op.reload()
        out["error"] = None
    except jit_loader.BuildError as e:
        out["error"] = str(e).splitlines()[0]
        out["error_line"] = e.line
        out["expected_line"] = bad_line
        out["log_exists"] = Path(e.log_path).is_file()
    out["after_error"] = held(ones).tolist()
    out["key_after_error"] = op.build.key

    source.write_text(original_source.replace("return x * kFactor;", "return x * kFactor + 1;"))
    op.reload()
    out["after_fix"] = held(ones).tolist()

    # The op's Python surface is reloaded too, and its registrations replaced.
    (op_dir / "toy_op.py").write_text(
        "import torch\\nLIB = torch.library.Library('toy_op', 'FRAGMENT')\\n"
        "def scaled_sum(x):\\n    return torch.ops.toy_op.scale(x).sum()\\n")
    op.reload()
    out["surface_v1"] = op.scaled_sum(ones).item()
    # ... and, outside ops/, its relative imports find the folder's other modules.
    (op_dir / "helpers.py").write_text("FACTOR = 10\\n")
    (op_dir / "toy_op.py").write_text(
        "import torch\\nfrom .helpers import FACTOR\\n"
        "LIB = torch.library.Library('toy_op', 'FRAGMENT')\\n"
        "def scaled_sum(x):\\n    return torch.ops.toy_op.scale(x).sum() * FACTOR\\n")
    out["surface_reloaded"] = op.reload()
    out["surface_v2"] = op.scaled_sum(ones).item()
    out["builds"] = len(jit_loader.cached_builds("toy_op"))
    print(json.dumps(out))
"""


def test_edit_revert_error_and_recover_in_one_process(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    cache = tmp_path / "cache"
    out = json_result(run_python(IN_PROCESS_EDITS.format(path=str(op_dir)), cache=cache))

    assert out["initial"] == [2.0, 2.0]
    # header edit picked up in the same process; the wrapper handed out earlier follows
    assert out["edit_reloaded"] and out["edit_compiled"]
    assert out["held_after_edit"] == [5.0, 5.0]
    assert out["fresh_after_edit"] == [5.0, 5.0]
    # reverting reuses the first build: no compile
    assert out["revert_reloaded"] and out["revert_compiled"] is False
    assert out["held_after_revert"] == [2.0, 2.0]
    # compile error: first line is file:line: message of the user's file
    source = str(op_dir / "toy_op.cpp")
    assert out["error"] is not None
    assert out["error"].startswith(f"{source}:{out['expected_line']}: ")
    assert "kFactr" in out["error"]
    assert out["error_line"] == out["expected_line"]
    assert out["log_exists"]
    # the previous build stays in use, then fixing the source recovers
    assert out["after_error"] == [2.0, 2.0]
    assert out["after_fix"] == [3.0, 3.0]
    assert out["surface_v1"] == 6.0
    assert out["surface_reloaded"] and out["surface_v2"] == 60.0
    # the failed build was never cached: 2.0, 5.0 and the fixed version only
    assert out["builds"] == 3


def test_failed_build_is_not_remembered_as_done(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    source = op_dir / "toy_op.cpp"
    source.write_text(source.read_text().replace("return x * kFactor;", "return x * ;"))
    env = private_env(tmp_path / "cache")
    for _ in range(2):  # the second process must try (and fail) again, not import junk
        proc = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
        assert proc.returncode != 0
        assert "BuildError" in proc.stderr
        assert f"{source}:" in proc.stderr
    listing = json_result(run_python(
        "import json, jit_loader; print(json.dumps(jit_loader.cached_builds('toy_op')))", env=env))
    assert listing == []


# --------------------------------------------------------------------------------------
# 4: PYBIND11_MODULE modules reload in the same process too.
# --------------------------------------------------------------------------------------

PYBIND_RELOAD = """
    import json, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    op = jit_loader.load(op_dir)
    answer = op.answer                     # a handle taken before the reload
    first = answer()
    source = op_dir / "toy_pybind.cpp"
    source.write_text(source.read_text().replace("return 42;", "return 43;"))
    op.reload()
    print(json.dumps({{"first": first, "second": op.answer(), "handle": answer(),
                      "twice": op.twice(torch.ones(2)).tolist()}}))
"""


def test_pybind_module_reloads_in_process(tmp_path):
    op_dir = copy_op("toy_pybind", tmp_path)
    out = json_result(run_python(PYBIND_RELOAD.format(path=str(op_dir)), cache=tmp_path / "cache"))
    assert out == {"first": 42, "second": 43, "handle": 43, "twice": [2.0, 2.0]}


# --------------------------------------------------------------------------------------
# 8: many processes at once compile exactly once.
# --------------------------------------------------------------------------------------


def test_concurrent_processes_compile_once(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    set_factor(op_dir, 7.0)
    env = private_env(tmp_path / "cache")
    code = LOAD_AND_SCALE.format(path=str(op_dir))
    procs = [start_python(code, env=env) for _ in range(4)]
    results = [json_result(wait_for(p)) for p in procs]
    assert sum(r["compiled"] for r in results) == 1
    assert all(r["y"] == [7.0, 7.0, 7.0] for r in results)
    assert len({r["key"] for r in results}) == 1


# --------------------------------------------------------------------------------------
# 7: a build killed mid-way blocks nothing and poisons nothing.
# --------------------------------------------------------------------------------------


def test_sigkill_during_build_then_next_load_succeeds(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    set_factor(op_dir, 9.0)
    cache = tmp_path / "cache"
    env = private_env(cache)
    victim = start_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Generous: on a busy 2-core machine importing torch alone can take a minute.
        deadline = time.time() + 300
        compiling = False
        while time.time() < deadline and not compiling:
            logs = list(cache.glob("toy_op/work-*/build.log"))
            compiling = bool(logs) and "[1/" in logs[0].read_text()
            time.sleep(0.2)
        assert compiling, "the build never started"
        time.sleep(1.0)  # somewhere inside the compiler
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()

    started = time.time()
    out = json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env, timeout=300))
    assert out["y"] == [9.0, 9.0, 9.0]
    assert time.time() - started < 240
    builds = list((cache / "toy_op" / "builds").iterdir())
    assert [b.name for b in builds] == [out["key"]]


# --------------------------------------------------------------------------------------
# 5, 9: two translation units, CUDA compiled with no GPU; one edited unit rebuilds alone.
# --------------------------------------------------------------------------------------

CUDA_INCREMENTAL = """
    import json, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    out = {{"arch": jit_loader.cuda_arch_list()}}
    op = jit_loader.load(op_dir)
    work = Path(op.build.log_path).parent
    objects = lambda: {{p.name: p.stat().st_mtime_ns for p in work.glob("*.o")}}
    out["ninja"] = (work / "build.ninja").read_text()
    out["cuda_kernel"] = torch._C._dispatch_has_kernel_for_dispatch_key("toy_cuda::offset", "CUDA")
    before = objects()
    cu = op_dir / "toy_cuda_kernel.cu"
    cu.write_text(cu.read_text().replace("x[i] + 1.0f", "x[i] + 2.0f"))
    op.reload()
    after_cu = objects()
    cpp = op_dir / "toy_cuda.cpp"
    cpp.write_text(cpp.read_text().replace("return x + 1;", "return x + 2;"))
    op.reload()
    after_cpp = objects()
    out["cpu"] = torch.ops.toy_cuda.offset(torch.zeros(2)).tolist()
    out["changed_by_cu"] = sorted(k for k in before if after_cu[k] != before[k])
    out["changed_by_cpp"] = sorted(k for k in before if after_cpp[k] != after_cu[k])
    print(json.dumps(out))
"""


@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc and a CUDA build of torch")
def test_cuda_compiles_without_gpu_and_edits_rebuild_one_unit(tmp_path):
    op_dir = copy_op("toy_cuda", tmp_path)
    # No GPU visible and no arch list given: the loader's default list, not IndexError.
    env = private_env(tmp_path / "cache", CUDA_VISIBLE_DEVICES="", JIT_LOADER_CUDA_ARCH=None,
                      TORCH_CUDA_ARCH_LIST=None)
    out = json_result(run_python(CUDA_INCREMENTAL.format(path=str(op_dir)), env=env))
    assert out["arch"] == jit_loader.DEFAULT_CUDA_ARCH
    assert "-gencode=arch=compute_80,code=sm_80" in out["ninja"]
    assert "-gencode=arch=compute_90,code=sm_90" in out["ninja"]
    assert "-gencode=arch=compute_90,code=compute_90" in out["ninja"]
    # nvcc through the driver that compiles the host and device halves side by side
    assert re.search(r"^nvcc = .*/nvcc-\w+/nvcc$", out["ninja"], re.M), out["ninja"]
    assert out["cuda_kernel"] is True
    assert out["changed_by_cu"] == ["toy_cuda_kernel.cuda.o"]
    assert out["changed_by_cpp"] == ["toy_cuda.o"]
    assert out["cpu"] == [2.0, 2.0]


NO_NVCC = """
    import json, torch, jit_loader
    op = jit_loader.load({path!r})
    out = {{"cpu": torch.ops.toy_cuda.offset(torch.zeros(2)).tolist(),
           "with_cuda": op.build.with_cuda, "reason": op.build.no_cuda_reason}}
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    try:
        torch.ops.toy_cuda.offset.default.redispatch(keyset, torch.zeros(2))
        out["cuda_error"] = None
    except Exception as e:
        out["cuda_error"] = str(e)
    print(json.dumps(out))
"""


def test_without_nvcc_builds_cpu_only_and_cuda_calls_explain(tmp_path):
    op_dir = copy_op("toy_cuda", tmp_path)
    env = private_env(tmp_path / "cache", CUDA_HOME=str(tmp_path / "no_cuda_here"))
    proc = run_python(NO_NVCC.format(path=str(op_dir)), env=env)
    out = json_result(proc)
    assert out["cpu"] == [1.0, 1.0]
    assert out["with_cuda"] is False
    assert "CUDA_HOME" in out["reason"] and "no bin/nvcc" in out["reason"]
    assert "for CPU only" in proc.stderr
    assert out["cuda_error"] is not None
    assert "toy_cuda::offset has no CUDA kernel" in out["cuda_error"]
    assert "CUDA_HOME" in out["cuda_error"]


CPU_ONLY = """
    import json, os, torch, jit_loader
    op = jit_loader.load({path!r}, **({{}} if os.environ.get("JIT_LOADER_CUDA") else {{"with_cuda": False}}))
    out = {{"cpu": torch.ops.toy_cuda.offset(torch.zeros(2)).tolist(), "compiled": op.build.compiled,
           "key": op.build.key, "with_cuda": op.build.with_cuda,
           "cuda_key": jit_loader.op_key({path!r}, with_cuda=None)[0]}}
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    try:
        torch.ops.toy_cuda.offset.default.redispatch(keyset, torch.zeros(2))
    except Exception as e:
        out["cuda_error"] = str(e)
    print(json.dumps(out))
"""


def test_with_cuda_false_builds_an_op_folder_without_its_cuda_sources(tmp_path):
    """load(folder, with_cuda=False), or JIT_LOADER_CUDA=0: no .cu compiles (a CPU edit loop
    that never waits for nvcc), under a key of its own; CUDA calls say why they can't run."""
    op_dir = copy_op("toy_cuda", tmp_path)
    cache = tmp_path / "cache"
    first = json_result(run_python(CPU_ONLY.format(path=str(op_dir)), env=private_env(cache)))
    assert first["cpu"] == [1.0, 1.0] and first["compiled"] and first["with_cuda"] is False
    assert first["key"] != first["cuda_key"]
    assert "toy_cuda_kernel" not in ninja_log(cache, "toy_cuda")  # nvcc never ran
    assert first["cuda_error"] == (
        "toy_cuda::offset has no CUDA kernel: op 'toy_cuda' was built without its CUDA sources "
        "because a CPU-only build was asked for (with_cuda=False or JIT_LOADER_CUDA=0); load it "
        "without with_cuda=False (and JIT_LOADER_CUDA unset) to build them.")
    again = json_result(run_python(CPU_ONLY.format(path=str(op_dir)),
                                   env=private_env(cache, JIT_LOADER_CUDA="0")))
    assert again["key"] == first["key"] and not again["compiled"]  # the same build, from the cache
    assert again["cuda_error"] == first["cuda_error"]


# --------------------------------------------------------------------------------------
# Bad input: each gives one clear error naming the thing and what to do.
# --------------------------------------------------------------------------------------


def test_missing_op_lists_available_ops():
    with pytest.raises(jit_loader.OpNotFoundError) as err:
        jit_loader.load("no_such_op")
    message = str(err.value)
    assert "no op named 'no_such_op'" in message
    for name in jit_loader.available_ops():
        assert name in message


def test_missing_folder_and_folder_without_sources(tmp_path):
    with pytest.raises(jit_loader.OpNotFoundError, match="does not exist"):
        jit_loader.load(tmp_path / "nowhere")
    empty = tmp_path / "empty_op"
    empty.mkdir()
    (empty / "notes.txt").write_text("no sources here")
    with pytest.raises(jit_loader.JitLoaderError, match=r"no C\+\+/CUDA source .* in .*empty_op"):
        jit_loader.load(empty)


def test_unusable_cache_directory_is_named(tmp_path):
    op_dir = copy_op("toy_op", tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    env = private_env(blocker / "cache")
    proc = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
    assert proc.returncode != 0
    assert "CacheError" in proc.stderr
    assert str(blocker / "cache") in proc.stderr
    assert "JIT_LOADER_CACHE" in proc.stderr


def test_disk_full_while_publishing_leaves_cache_consistent(tmp_path, monkeypatch):
    import errno

    op_dir = copy_op("toy_op", tmp_path)
    set_factor(op_dir, 11.0)
    monkeypatch.setenv("JIT_LOADER_CACHE", str(tmp_path / "cache"))

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copy2", no_space)
    with pytest.raises(jit_loader.CacheError, match="disk full") as err:
        jit_loader.load_library(op_dir)
    assert "JIT_LOADER_CACHE" in str(err.value)
    builds = tmp_path / "cache" / "toy_op" / "builds"
    assert list(builds.iterdir()) == []  # no half-published entry, no leftovers
    forget(op_dir.resolve())


# --------------------------------------------------------------------------------------
# Errors cross process boundaries; messages go through logging.
# --------------------------------------------------------------------------------------


# g++ 12 on an error inside an AT_DISPATCH lambda: torch's include chain (of the file that
# defines the dispatch macros) comes before the message about the user's line.
DISPATCH_ERROR = """\
[1/3] c++ -MMD -MF op.o.d -c {op}/op.cpp -o op.o
FAILED: op.o
c++ -MMD -MF op.o.d -c {op}/op.cpp -o op.o
In file included from {torch}/torch/headeronly/core/Dispatch_v2.h:3,
                 from {torch}/c10/core/Scalar.h:25,
                 from {torch}/ATen/core/TensorBody.h:17,
                 from {torch}/ATen/core/ivalue.h:5,
                 from {torch}/ATen/core/List_inl.h:5,
                 from {torch}/ATen/core/List.h:492,
                 from {torch}/ATen/core/IListRef_inl.h:4,
                 from {torch}/ATen/core/IListRef.h:634,
                 from {torch}/ATen/DeviceGuard.h:4,
                 from {torch}/ATen/ATen.h:10,
                 from {op}/op.cpp:1:
{op}/op.cpp: In lambda function:
{op}/op.cpp:9:62: error: 'undefined_thing' was not declared in this scope
    9 |     for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] * undefined_thing;
      |                                                              ^~~~~~~~~~~~~~~
{torch}/ATen/Dispatch.h:58:7: note: in definition of macro 'AT_PRIVATE_CASE_TYPE_USING_HINT'
   58 |       __VA_ARGS__();                                                       \\
      |       ^~~~~~~~~~~
In file included from {op}/op_helpers.h:2,
                 from {op}/op.cpp:3:
{torch}/c10/util/Half.h:12:3: error: something in torch's header
ninja: build stopped: subcommand failed.
"""


def test_build_error_drops_torch_context_around_the_users_error(tmp_path):
    from jit_tools.builder import ninja

    op, torch_inc = tmp_path / "op", "/venv/torch/include"
    lines = [l + "\n" for l in DISPATCH_ERROR.format(op=op, torch=torch_inc).splitlines()]
    err = ninja.build_error("op", lines, 1, tmp_path / "build.log", [op], tmp_path)
    text = str(err).splitlines()
    assert text[0] == f"{op}/op.cpp:9: 'undefined_thing' was not declared in this scope"
    assert text[2:7] == ["FAILED: op.o", f"{op}/op.cpp: In lambda function:",
                         f"{op}/op.cpp:9:62: error: 'undefined_thing' was not declared in this scope",
                         "    9 |     for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] * undefined_thing;",  # noqa: E501
                         "      |                                                              ^~~~~~~~~~~~~~~"]  # noqa: E501
    assert not any("Dispatch_v2.h" in l or "AT_PRIVATE_CASE" in l or "__VA_ARGS__" in l for l in text)
    # An error in a torch header keeps the chain from the user's file that leads to it.
    assert text[7:10] == [f"In file included from {op}/op_helpers.h:2,",
                         f"                 from {op}/op.cpp:3:",
                         f"{torch_inc}/c10/util/Half.h:12:3: error: something in torch's header"]
    assert err.log == "".join(lines)  # the full log keeps everything


def test_errors_pickle_with_their_attributes():
    import pickle

    err = jit_loader.BuildError("a.cpp:3: boom\nmore", log_path="/x/build.log", file="a.cpp",
                                line=3, log="the log")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is jit_loader.BuildError and str(back) == str(err)
    assert (back.log_path, back.file, back.line, back.log) == ("/x/build.log", "a.cpp", 3, "the log")
    for cls in (jit_loader.JitLoaderError, jit_loader.CacheError, jit_loader.OpNotFoundError):
        assert str(pickle.loads(pickle.dumps(cls("why")))) == "why"


def test_warnings_go_to_the_jit_loader_logger(monkeypatch, caplog):
    from jit_tools import usage

    monkeypatch.setenv("JIT_LOADER_KEEP", "many")
    with caplog.at_level("INFO", logger="jit_loader"):
        assert usage.keep_count() == usage.DEFAULT_KEEP
    (record,) = [r for r in caplog.records if r.name == "jit_loader"]
    assert record.levelname == "WARNING" and "JIT_LOADER_KEEP='many'" in record.getMessage()
