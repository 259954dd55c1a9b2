"""The command line, ``python -m jit_loader list|build|clean|doctor``, run as a user runs it:
in a subprocess, with the cache in a temporary folder.

One cold build of the toy op (tests/fixtures/toy_op, copied) is shared by the whole
file. Tests that clean or inspect a damaged cache work on a copy of it; tests that
need a rebuild damage the shared cache in place (its Ninja work folder makes the
rebuild a no-op compile) and restore it afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from jit_tools import usage
from jit_tools.store import CacheStore
from subproc import private_env, run_cli, run_python, start_python
from toy_ops import FIXTURES

LOAD_AND_CALL = """
import sys, torch, jit_loader
op = jit_loader.load_library(sys.argv[1])
print(op.build.compiled, torch.ops.toy_op.scale(torch.ones(3)).tolist())
"""


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The toy op, built once by ``python -m jit_loader build`` into a session cache."""
    base = tmp_path_factory.mktemp("cli")
    op_dir = base / "src" / "toy_op"
    shutil.copytree(FIXTURES / "toy_op", op_dir)
    cache = base / "cache"
    first = run_cli("build", op_dir, env=private_env(cache))
    assert first.returncode == 0, first.stdout + first.stderr
    (entry,) = (cache / "toy_op" / "builds").iterdir()
    return SimpleNamespace(op_dir=op_dir, cache=cache, first=first, key=entry.name)


def cache_copy(built, tmp_path: Path) -> Path:
    """A copy of the session cache to damage or clean. Not for rebuilding: the copy's
    work folder has another path, so Ninja would compile everything again."""
    cache = tmp_path / "cache"
    shutil.copytree(built.cache, cache)
    return cache


@contextlib.contextmanager
def damaged_library(built, damage: str):
    """Damage the session cache's toy_op library in place (a rebuild there is a no-op
    for Ninja); put the original back afterwards whatever the test did."""
    so = build_folder(built.cache, built.key) / "toy_op.so"
    original = so.read_bytes()
    if damage == "truncated":
        os.truncate(so, len(original) // 2)
    else:  # garbled at the same size, so only loading it can tell
        so.write_bytes(b"\0" * len(original))
    try:
        yield so
    finally:
        so.write_bytes(original)


def build_folder(cache: Path, key: str) -> Path:
    return cache / "toy_op" / "builds" / key


def write_broken_op(parent: Path, name: str) -> Path:
    op_dir = parent / name
    op_dir.mkdir(parents=True)
    (op_dir / f"{name}.cpp").write_text(textwrap.dedent("""\
        #include <torch/library.h>

        int broken() {
          return undefined_name;
        }
        """))
    return op_dir


# --------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------


def test_build_shows_progress_then_is_quiet_when_cached(built):
    assert "ok      toy_op  built in" in built.first.stdout
    assert "building toy_op" in built.first.stderr  # the progress bar

    again = run_cli("build", built.op_dir, env=private_env(built.cache))
    assert again.returncode == 0, again.stderr
    assert f"toy_op  up to date (cached), key {built.key}" in again.stdout
    assert again.stderr == ""


def test_cache_hit_in_a_new_process_prints_nothing(built):
    out = run_python(LOAD_AND_CALL, built.op_dir, env=private_env(built.cache), timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "False [2.0, 2.0, 2.0]\n"  # not compiled, and it runs
    assert out.stderr == ""


def test_build_failure_names_first_error_and_the_other_op_still_builds(built, tmp_path):
    broken = write_broken_op(tmp_path, "broken_op")
    # A truncated library is not a build: toy_op goes to a worker next to the broken op.
    with damaged_library(built, "truncated"):
        out = run_cli("build", built.op_dir, broken, "-j", "2", env=private_env(built.cache))
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    failed = next(l for l in lines if l.startswith("FAILED"))
    assert "broken_op" in failed and "broken_op.cpp:4: " in failed and "undefined_name" in failed
    assert any("full log:" in l and "build.log" in l for l in lines)
    assert any(l.startswith("ok") and "toy_op" in l and "built in" in l for l in lines)
    assert "1 of 2 ops failed to build" in out.stdout


def test_build_unknown_op_is_a_usage_error(built):
    out = run_cli("build", "no_such_op", env=private_env(built.cache))
    assert out.returncode == 2
    assert "no op named 'no_such_op'" in out.stderr


# --------------------------------------------------------------------------------------
# cache housekeeping
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_damaged_library_is_rebuilt_by_the_next_load(built, damage):
    with damaged_library(built, damage) as so:
        out = run_python(LOAD_AND_CALL, built.op_dir, env=private_env(built.cache), timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "True [2.0, 2.0, 2.0]\n"  # compiled again, and it runs
        manifest = json.loads((so.parent / "manifest.json").read_text())
        assert so.stat().st_size == manifest["size"]


# --------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------


def test_list_marks_the_build_a_process_would_load(built):
    out = run_cli("list", built.op_dir, "--json", env=private_env(built.cache))
    assert out.returncode == 0, out.stderr
    listing = json.loads(out.stdout)
    assert listing["cache"] == str(built.cache)
    (op,) = [o for o in listing["ops"] if o["path"] == str(built.op_dir)]
    assert op["current_key"] == built.key and op["current_cached"]
    (build,) = op["builds"]
    assert build["key"] == built.key
    assert build["current"] and build["valid"] and not build["in_use"]
    assert build["size_bytes"] > 0 and build["age_seconds"] >= 0

    text = run_cli("list", built.op_dir, env=private_env(built.cache))
    assert text.returncode == 0, text.stderr
    assert f"* {built.key}" in text.stdout
    assert f"a new process loads build {built.key} (cached, no compile)" in text.stdout


# --------------------------------------------------------------------------------------
# clean
# --------------------------------------------------------------------------------------


def test_clean_never_removes_a_build_a_live_process_holds(built, tmp_path):
    cache = cache_copy(built, tmp_path)
    entry = build_folder(cache, built.key)
    holder_code = LOAD_AND_CALL + "sys.stdout.flush()\nimport time; time.sleep(120)\n"
    holder = start_python(holder_code, built.op_dir, env=private_env(cache), stderr=None)
    try:
        assert holder.stdout.readline().startswith("False")  # loaded from the cache
        out = run_cli("clean", env=private_env(cache))
        assert out.returncode == 0, out.stderr
        assert f"skipped       toy_op/{built.key}  in use" in out.stdout
        assert entry.is_dir() and list((cache / "toy_op").glob("work-*"))
    finally:
        holder.kill()
        holder.wait()

    out = run_cli("clean", env=private_env(cache))
    assert out.returncode == 0, out.stderr
    assert f"removed       toy_op/{built.key}" in out.stdout
    assert not entry.exists()
    assert not list((cache / "toy_op").glob("work-*"))  # cleaned entirely: work folder too


def fake_build(cache: Path, real_key: str, key: str, days_old: float) -> Path:
    """A copy of the real build under another key, created ``days_old`` days ago."""
    entry = build_folder(cache, key)
    shutil.copytree(build_folder(cache, real_key), entry)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest.update(key=key, created=time.time() - days_old * 86400)
    (entry / "manifest.json").write_text(json.dumps(manifest))
    return entry


def test_clean_older_than_and_keep(built, tmp_path):
    cache = cache_copy(built, tmp_path)
    current = build_folder(cache, built.key)
    recent = fake_build(cache, built.key, "1" * 20, days_old=2)
    old = fake_build(cache, built.key, "0" * 20, days_old=40)

    dry = run_cli("clean", "--older-than", "30", "--dry-run", env=private_env(cache))
    assert dry.returncode == 0, dry.stderr
    assert f"would remove  toy_op/{old.name}" in dry.stdout and recent.name not in dry.stdout
    assert old.exists()

    out = run_cli("clean", "toy_op", "--older-than", "30", env=private_env(cache))
    assert out.returncode == 0, out.stderr
    assert not old.exists() and recent.exists() and current.exists()

    out = run_cli("clean", "--keep", "1", env=private_env(cache))
    assert out.returncode == 0, out.stderr
    assert not recent.exists() and current.exists()
    assert list((cache / "toy_op").glob("work-*"))  # not cleaned entirely: work folder stays


def test_clean_keep_never_removes_the_build_a_new_process_loads(built, tmp_path):
    cache = cache_copy(built, tmp_path)
    current = build_folder(cache, built.key)
    manifest = json.loads((current / "manifest.json").read_text())
    manifest["created"] = time.time() - 5 * 86400  # older than both builds below
    (current / "manifest.json").write_text(json.dumps(manifest))
    newest = fake_build(cache, built.key, "1" * 20, days_old=1)
    middle = fake_build(cache, built.key, "2" * 20, days_old=2)

    out = run_cli("clean", "--keep", "1", env=private_env(cache))
    assert out.returncode == 0, out.stderr
    assert newest.exists() and not middle.exists()
    assert current.exists(), out.stdout  # not among the newest, but a new process loads it
    listing = run_cli("list", built.op_dir, env=private_env(cache))
    assert f"* {built.key}" in listing.stdout


def test_clean_max_size_removes_least_recently_used_builds(built, tmp_path):
    cache = cache_copy(built, tmp_path)
    current = build_folder(cache, built.key)
    unused = fake_build(cache, built.key, "1" * 20, days_old=1)
    used = fake_build(cache, built.key, "2" * 20, days_old=3)  # older, but loaded lately
    usage.record(CacheStore(cache), "toy_op", used.name, "local cache", compiled=False)
    usage.record(CacheStore(cache), "toy_op", built.key, "local cache", compiled=False)
    total = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    one = sum(f.stat().st_size for f in unused.rglob("*") if f.is_file())
    out = run_cli("clean", "--max-size", str(total - one // 2), env=private_env(cache))
    assert out.returncode == 0, out.stderr
    assert f"removed       toy_op/{unused.name}  " in out.stdout and "least recently used" in out.stdout
    assert not unused.exists() and used.exists() and current.exists()
    bad = run_cli("clean", "--max-size", "lots", env=private_env(cache))
    assert bad.returncode != 0 and "'lots' is not a size such as 500M" in bad.stderr


def test_shared_pieces_and_ccache_are_reported_and_cleaned_only_while_no_build_runs(built, tmp_path):
    import fcntl
    cache = cache_copy(built, tmp_path)
    piece = cache / "_shared" / "pch-0123456789abcdef"
    piece.mkdir(parents=True)
    (piece / "jit_loader_lean.h.gch").write_bytes(b"x" * 300_000)
    (piece / "ok").write_text("1.0\n")
    shutil.rmtree(cache / "_ccache", ignore_errors=True)  # the build's own, if any
    (cache / "_ccache").mkdir()
    (cache / "_ccache" / "object").write_bytes(b"y" * 50_000)
    env = {"JIT_LOADER_SHARED_DIR": "", "JIT_LOADER_CCACHE_DIR": ""}  # this cache's own, inside it

    listing = run_cli("list", "--json", env=private_env(cache, **env))
    doc = json.loads(listing.stdout)
    (pch,) = [p for p in doc["shared"] if p["kind"] == "pch"]
    assert pch["bytes"] >= 300_000 and pch["ok"]
    assert doc["ccache"]["bytes"] >= 50_000
    text = run_cli("list", env=private_env(cache, **env)).stdout
    assert "pch-0123456789abcdef" in text and "ccache store" in text
    doctor = run_cli("doctor", env=private_env(cache, **env)).stdout
    summary = next(l for l in doctor.splitlines() if "build(s) of" in l)
    assert "1 shared piece(s)" in summary and "pch 300.0 kB" in summary, summary
    assert "ccache's store 50.0 kB" in summary, summary

    lock = os.open(cache / "toy_op" / "build.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build of toy_op under way
        out = run_cli("clean", "--shared", env=private_env(cache, **env))
        assert out.returncode == 0, out.stderr
        assert "skipped       shared pieces" in out.stdout and "building toy_op now" in out.stdout
        assert piece.is_dir() and (cache / "_ccache").is_dir()
    finally:
        os.close(lock)
    out = run_cli("clean", "--shared", env=private_env(cache, **env))
    assert out.returncode == 0, out.stderr
    assert "removed       _shared/pch-0123456789abcdef" in out.stdout
    assert not piece.exists() and not (cache / "_ccache").exists()
    assert build_folder(cache, built.key).is_dir()  # builds are not shared pieces

    # A store that several caches use (JIT_LOADER_CCACHE_DIR) is listed, not removed: this
    # cache cannot tell which of its objects the others' builds use.
    common = tmp_path / "common-ccache"
    common.mkdir()
    (common / "object").write_bytes(b"z" * 40_000)
    env["JIT_LOADER_CCACHE_DIR"] = str(common)
    doc = json.loads(run_cli("list", "--json", env=private_env(cache, **env)).stdout)
    assert doc["ccache"] == {"path": str(common), "bytes": 40_000}, doc["ccache"]
    out = run_cli("clean", "--shared", env=private_env(cache, **env))
    assert out.returncode == 0, out.stderr
    assert "_ccache" not in out.stdout and (common / "object").is_file(), out.stdout


def test_clean_broken_removes_damage_that_doctor_reports(built, tmp_path):
    cache = cache_copy(built, tmp_path)
    good = fake_build(cache, built.key, "1" * 20, days_old=1)
    bad = build_folder(cache, built.key)
    so = bad / "toy_op.so"
    os.truncate(so, so.stat().st_size // 2)
    leftover = cache / "toy_op" / "builds" / ".tmp-abc-12345"
    leftover.mkdir()

    doctor = run_cli("doctor", env=private_env(cache))
    warn = next(l for l in doctor.stdout.splitlines() if "broken cache entr" in l)
    assert warn.startswith("WARN") and "clean --broken" in warn and "truncated" in warn

    out = run_cli("clean", "--broken", env=private_env(cache))
    assert out.returncode == 0, out.stderr
    assert "toy_op/builds/.tmp-abc-12345" in out.stdout
    assert not bad.exists() and not leftover.exists() and good.exists()


# --------------------------------------------------------------------------------------
# doctor
# --------------------------------------------------------------------------------------


def verdicts(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    assert lines and all(l.split(" ", 1)[0] in ("OK", "WARN", "ERROR") for l in lines), stdout
    return lines


def fake_cuda_toolkit(parent: Path, release: str) -> Path:
    """A folder that looks like a CUDA toolkit to doctor: an nvcc reporting ``release``
    and the headers ATen/cuda includes (empty). Keeps doctor's verdict on the toolchain
    independent of what toolkit this machine has."""
    home = parent / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
    nvcc.chmod(0o755)
    for header in ("cuda_runtime_api.h", "cublas_v2.h", "cublasLt.h", "cusparse.h", "cusolverDn.h"):
        (home / "include" / header).touch()
    return home


def test_doctor_healthy_setup_exits_zero(built, tmp_path):
    env = {"CUDA_HOME": str(fake_cuda_toolkit(tmp_path, torch.version.cuda or "13.0"))}
    out = run_cli("doctor", env=private_env(cache_copy(built, tmp_path), **env))
    lines = verdicts(out.stdout)
    assert out.returncode == 0, out.stdout
    assert not [l for l in lines if l.startswith("ERROR")]
    assert any(l.startswith("OK") and "torch" in l for l in lines)
    assert any(l.startswith("OK") and "writable" in l for l in lines)


def test_doctor_cuda_home_pointing_nowhere_is_an_error(tmp_path):
    out = run_cli("doctor", env=private_env(tmp_path / "cache", CUDA_HOME=str(tmp_path / "nowhere")))
    lines = verdicts(out.stdout)
    assert out.returncode == 1
    assert any(l.startswith("ERROR") and "CUDA_HOME" in l and "bin/nvcc" in l for l in lines)


@pytest.mark.skipif(torch.version.cuda is None, reason="CPU-only torch ignores nvcc")
def test_doctor_nvcc_of_another_cuda_major_is_an_error_with_the_fix(tmp_path):
    major = int(torch.version.cuda.split(".")[0])
    home = fake_cuda_toolkit(tmp_path, f"{major - 1}.8")
    out = run_cli("doctor", env=private_env(tmp_path / "cache", CUDA_HOME=str(home)))
    assert out.returncode == 1
    (line,) = [l for l in verdicts(out.stdout) if "nvcc" in l and l.startswith("ERROR")]
    assert f"CUDA {major - 1}.8" in line and f"set CUDA_HOME to a CUDA {major}.x toolkit" in line
    assert f"install a torch built for CUDA {major - 1}.x" in line


def test_doctor_cache_that_cannot_be_created_is_an_error(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    out = run_cli("doctor", env=private_env(a_file / "cache"))
    lines = verdicts(out.stdout)
    assert out.returncode == 1
    assert any(l.startswith("ERROR") and "not writable" in l and "JIT_LOADER_CACHE" in l for l in lines)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_doctor_read_only_cache_folder_is_an_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        out = run_cli("doctor", env=private_env(locked / "cache"))
    finally:
        locked.chmod(0o700)
    assert out.returncode == 1
    assert any(l.startswith("ERROR") and "not writable" in l for l in verdicts(out.stdout))
