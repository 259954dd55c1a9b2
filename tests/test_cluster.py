"""One cache for a cluster: builds that stay correct on a shared filesystem whose locks do
nothing (or lock one host only), a vanished build looked up again, never-compile mode, and
where each loaded build came from. Real builds of the tiny stable op in private caches,
each process a fresh interpreter.

Locks that do nothing are ``JIT_LOADER_LOCKS=off``; processes of other hosts are
``JIT_LOADER_HOSTNAME``. The tests turn the shared build pieces off (``JIT_LOADER_PCH=0``
and so on): without locks every process would build them too, and they prove nothing here.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from jit_tools import layers, locks, store as stores
from jit_tools.builder import ninja_file, process_pieces, shared
from subproc import json_result, private_env, run_cli, run_python, start_python, wait_for
from toy_ops import LOAD, NO_PIECES, copy_op, set_factor

def env_for(cache, **extra) -> dict:
    return private_env(Path(cache) if not isinstance(cache, str) else cache, **NO_PIECES, **extra)


def listing(cache, *args) -> subprocess.CompletedProcess:
    return run_cli("list", *args, env=env_for(cache), timeout=600)


# --------------------------------------------------------------------------------------
# Shared filesystems: locks that do nothing, several hosts, vanished builds.
# --------------------------------------------------------------------------------------


def test_sixteen_processes_of_four_hosts_without_locks_cold_on_one_op(tmp_path):
    """Sixteen processes cold-load one op from one cache while flock locks nothing, four
    of them on each of four claimed hosts: every one computes the right result, exactly
    one build is published, and nothing is left half done (``list --verify`` is clean).
    The processes may all compile (nothing tells them apart): only the winner publishes."""
    op_dir = copy_op("stable_op", tmp_path)
    set_factor(op_dir, 5.0)
    cache = tmp_path / "cache"
    procs = [start_python(LOAD, op_dir, env=env_for(cache, JIT_LOADER_LOCKS="off",
                                                    JIT_LOADER_HOSTNAME=f"node{i % 4}"))
             for i in range(16)]
    results = [json_result(wait_for(p, timeout=1200)) for p in procs]
    assert all(r["y"] == [5.0] * 3 for r in results), results
    assert len({r["key"] for r in results}) == 1
    builds = cache / "stable_op" / "builds"
    assert [p.name for p in builds.iterdir()] == [results[0]["key"]]  # no .tmp- either
    assert [p.name for p in (cache / "stable_op").glob("work-*")] == [
        next((cache / "stable_op").glob("work-*")).name]  # the shared one only: no claims left
    out = listing(cache, op_dir, "--verify")
    assert out.returncode == 0, out.stderr
    assert f"* {results[0]['key']}" in out.stdout and " ok" in out.stdout
    assert "BROKEN" not in out.stdout and "leftover" not in out.stdout


@pytest.mark.cuda
def test_four_processes_of_four_hosts_without_locks_cold_on_one_cuda_op(tmp_path):
    """The same with an op whose kernel is a .cu, called on the GPU, one process on each
    host. Every process compiles the .cu (nvcc with torch's headers), so the count stays at
    four; the sixteen-process test above is the one about many processes at once."""
    op_dir = copy_op("toy_cuda", tmp_path)
    cache = tmp_path / "cache"
    code = """
        import json, sys, torch, jit_loader
        op = jit_loader.load(sys.argv[1])
        y = torch.ops.toy_cuda.offset(torch.ones(3, device="cuda")).cpu()
        print(json.dumps({"key": op.build.key, "y": y.tolist()}))
    """
    procs = [start_python(code, op_dir, env=env_for(cache, JIT_LOADER_LOCKS="off",
                                                    JIT_LOADER_HOSTNAME=f"node{i}"))
             for i in range(4)]
    results = [json_result(wait_for(p, timeout=1800)) for p in procs]
    assert all(r["y"] == [2.0] * 3 for r in results), results
    assert [p.name for p in (cache / "toy_cuda" / "builds").iterdir()] == [results[0]["key"]]
    out = listing(cache, op_dir, "--verify")
    assert out.returncode == 0 and "BROKEN" not in out.stdout and "leftover" not in out.stdout


VANISHING = """
    import errno, json, os, shutil, sys, torch, jit_loader
    from pathlib import Path
    from jit_tools import registry
    real, how, calls = registry.open_library, sys.argv[2], []

    def open_once_vanished(path):
        # What another process (or host) does between this one finding the build and
        # loading it: removes it (ENOENT), or replaces it under an NFS client (ESTALE).
        calls.append(str(path))
        if len(calls) == 1:
            if how == "removed":
                shutil.rmtree(Path(path).parent)
            raise OSError(f"{path}: cannot open shared object file: "
                          f"{os.strerror(errno.ENOENT if how == 'removed' else errno.ESTALE)}")
        return real(path)

    registry.open_library = open_once_vanished
    op = jit_loader.load(sys.argv[1])
    y = torch.ops.stable_op.scale(torch.ones(3)).tolist()
    print(json.dumps({"compiled": op.build.compiled, "y": y, "opens": len(calls),
                      "exists": Path(op.library).is_file()}))
"""


@pytest.mark.parametrize("how", ["removed", "stale"])
def test_a_build_that_vanishes_before_it_is_loaded_is_looked_up_again(tmp_path, how):
    """ENOENT (the build was removed) and ESTALE (replaced under an NFS client) between
    finding a build and loading it are never raised: the load looks again and loads what
    it finds (the same build, still there) or builds it again (removed)."""
    op_dir = copy_op("stable_op", tmp_path)
    env = env_for(tmp_path / "cache")
    assert json_result(run_python(LOAD, op_dir, env=env))["compiled"] is True
    r = json_result(run_python(VANISHING, op_dir, how, env=env))
    assert r["y"] == [2.0] * 3 and r["opens"] == 2 and r["exists"]
    assert r["compiled"] is (how == "removed")  # a stale handle: the build is intact, kept


def test_a_claimed_work_folder_is_taken_over_only_from_a_dead_process_of_this_host(tmp_path, monkeypatch):
    """Host-private staging: a work folder claimed by a process of another host is never
    taken over (its pid means nothing here), one left by a dead process of this host is,
    and the shared one is taken first."""
    monkeypatch.setenv(locks.HOST_ENV, "node-a")
    dead = run_python("import os; print(os.getpid())").stdout.strip()
    store = stores.CacheStore(tmp_path)
    shared_name = store.work_folder("op", "t")
    other_host = shared_name.with_name(f"{shared_name.name}.node-b-{dead}")
    dead_here = shared_name.with_name(f"{shared_name.name}.node-a-{dead}")
    for folder in (other_host, dead_here):
        folder.mkdir(parents=True)
        (folder / "build.ninja").write_text(folder.name)
    assert not stores.stale_claim(other_host) and stores.stale_claim(dead_here)

    claim = store.claim_work("op", "t")  # no shared folder: the dead process's is taken
    assert claim.folder.name == f"{shared_name.name}.node-a-{os.getpid()}"
    assert (claim.folder / "build.ninja").read_text() == dead_here.name and not dead_here.exists()
    assert claim.release() == shared_name and other_host.is_dir()

    again = store.claim_work("op", "t")  # the shared one first
    assert (again.folder / "build.ninja").read_text() == dead_here.name
    shared_name.mkdir()  # meanwhile another process gave its folder back under that name
    (shared_name / "build.ninja").write_text("theirs")
    assert again.release() == again.folder and not again.folder.exists()
    assert (shared_name / "build.ninja").read_text() == "theirs"


def test_publication_keeps_the_first_valid_build_and_replaces_a_broken_one(tmp_path):
    first, second, dest = tmp_path / ".tmp-a", tmp_path / ".tmp-b", tmp_path / "key"
    for folder, text in ((first, "first"), (second, "second")):
        folder.mkdir()
        (folder / "lib").write_text(text)
    assert locks.publish_folder(first, dest, lambda d: True)
    assert not locks.publish_folder(second, dest, lambda d: True)  # lost the race: theirs stays
    assert (dest / "lib").read_text() == "first" and not second.exists()
    second.mkdir()
    (second / "lib").write_text("second")
    assert locks.publish_folder(second, dest, lambda d: False)  # a broken one is replaced
    assert (dest / "lib").read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


# --------------------------------------------------------------------------------------
# JIT_LOADER_COMPILE=never, and where each build came from.
# --------------------------------------------------------------------------------------


def test_never_compile_loads_what_the_layers_hold_and_names_what_differs(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    layer, local = tmp_path / "layer", tmp_path / "local"
    first = json_result(run_python(LOAD, op_dir, env=env_for(layer)))
    assert first["compiled"] is True and first["origin"] == "compiled"
    env = env_for(f"{layer}{os.pathsep}{local}", JIT_LOADER_COMPILE="never")

    hit = run_python(LOAD, op_dir, env=env)
    r = json_result(hit)
    assert r["compiled"] is False and r["origin"] == f"layer {layer}" and r["y"] == [2.0] * 3
    assert hit.stderr.strip() == ""  # quiet: not one log line

    set_factor(op_dir, 3.0)
    miss = run_python(LOAD, op_dir, env=env)
    assert miss.returncode != 0
    (line,) = [l for l in miss.stderr.splitlines() if l.startswith("jit_tools.errors.JitLoaderError")]
    assert "op 'stable_op': JIT_LOADER_COMPILE=never, and no cache layer holds build" in line
    assert f"the nearest, build {first['key']} in layer {layer}, differs in its header stable_op.h " \
           "(sha256 " in line
    set_factor(op_dir, 2.0)
    flags = run_python(LOAD.replace("jit_loader.load(sys.argv[1])",
                                    "jit_loader.load(sys.argv[1], extra_cflags=['-DFAST=1'])"),
                       op_dir, env=env)
    assert "differs in its C++ flags (nothing there only, -DFAST=1 here only)" in flags.stderr
    # Nothing compiled, nothing was written to build with.
    assert not list(local.glob("stable_op/work-*")) and not list(local.glob("stable_op/builds/*"))


def test_never_compile_raises_at_once_while_another_process_builds(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    cache = tmp_path / "cache"
    (cache / "stable_op").mkdir(parents=True)
    fd = os.open(cache / "stable_op" / "build.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a build under way: a compiling load would wait
        started = time.monotonic()
        out = run_python(LOAD, op_dir, env=env_for(cache, JIT_LOADER_COMPILE="never"), timeout=120)
        assert out.returncode != 0 and "JIT_LOADER_COMPILE=never" in out.stderr
        assert "nor any other" in out.stderr and time.monotonic() - started < 60
    finally:
        os.close(fd)


def test_never_compile_starts_no_background_build(monkeypatch, tmp_path):
    """The pieces shared by every op and the build after a kernel swap are compiles too."""
    from jit_tools.swap import hotswap
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv(layers.ENV, "never")
    monkeypatch.setenv("JIT_LOADER_SHARED_NOW", "1")
    assert not shared.build_now()
    ninja_file.build_later(ninja_file.PieceSpec(str(tmp_path), "c++", [], "", ""))
    process_pieces.build_autograd_later(tmp_path)
    process_pieces.build_fastcall_later(tmp_path)
    state = type("State", (), {"name": "x", "op_dir": tmp_path, "options": {}, "background": None})()
    hotswap.build_later(state, "0" * 20, {}, [], [])
    assert started == [] and state.background is None
    monkeypatch.setenv(layers.ENV, "sometimes")
    with pytest.raises(Exception, match="JIT_LOADER_COMPILE must be auto or never"):
        layers.never_compile()


def test_origin_and_counts_per_op(tmp_path):
    """Each load says where its build came from, and the cache keeps the op's hits and
    compiles, which ``list`` shows."""
    op_dir = copy_op("stable_op", tmp_path)
    cache = tmp_path / "cache"
    env = env_for(cache)
    origins = [json_result(run_python(LOAD, op_dir, env=env))["origin"] for _ in range(3)]
    assert origins == ["compiled", "local cache", "local cache"]
    out = listing(cache, "stable_op")
    assert "loads: 2 from a cache, 1 compiled; the last: local cache" in out.stdout, out.stdout
    doc = json.loads(listing(cache, "stable_op", "--json").stdout)
    (op,) = doc["ops"]
    assert op["usage"]["hits"] == 2 and op["usage"]["compiles"] == 1


def test_the_pieces_keys_use_torchs_own_include_folders():
    """A load computes the keys of the runtime pieces with torch's header folders taken
    without importing cpp_extension (setuptools): they must be the folders torch gives."""
    from torch.utils import cpp_extension
    from jit_tools.builder import toolchain
    assert toolchain.torch_include_paths() == cpp_extension.include_paths()


def test_a_node_without_nvcc_takes_a_build_for_the_arch_list_it_asks_for(monkeypatch, tmp_path):
    """Where torch is a CUDA build but nvcc is missing, the key wanted leaves CUDA out and a
    held CUDA build with the same files serves instead. An arch list asked for
    (JIT_LOADER_CUDA_ARCH) must be the one that build was made for; without one, any
    serves, newest first."""
    monkeypatch.setattr(layers.toolchain, "cuda_home", lambda: None)
    monkeypatch.setattr(layers.torch.version, "cuda", "13.0")
    files = [["op.cpp", "1" * 64]]
    wanted = {"config": {"with_cuda": False, "cuda_arch": None, "nvcc": None}, "files": files}

    def held_build(key, arch):
        config = {"with_cuda": True, "cuda_arch": arch, "nvcc": "/cuda/bin/nvcc"}
        return None, {"key": key, "inputs": {"config": config, "files": files}}

    monkeypatch.setattr(layers, "held", lambda name: [held_build("k8", "8.0"), held_build("k9", "9.0")])
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setenv("JIT_LOADER_CUDA_ARCH", "9.0")
    assert layers.substitute("op", tmp_path, wanted, None)[1] == "k9"
    assert layers.substitute("op", tmp_path, wanted, "8.0")[1] == "k8"
    monkeypatch.setenv("JIT_LOADER_CUDA_ARCH", "7.5")
    assert layers.substitute("op", tmp_path, wanted, None) is None
    monkeypatch.delenv("JIT_LOADER_CUDA_ARCH")
    assert layers.substitute("op", tmp_path, wanted, None)[1] == "k8"
    other = {**wanted, "files": [["op.cpp", "2" * 64]]}
    assert layers.substitute("op", tmp_path, other, None) is None
