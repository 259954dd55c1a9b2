"""Cache bookkeeping a user can trust, with real builds of the tiny stable op: last use is a
record of loads (a tool that hashes every library does not make a build look used), a
dry run of ``clean --max-size`` names what the real one removes, a bound below what is
never evicted says so, and builds of a same-named op from another folder neither confuse
``list`` nor share the op's budget of kept builds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from subproc import json_result, private_env, run_cli, run_python
from toy_ops import LOAD, NO_PIECES, copy_op, set_factor


def env_for(cache: Path, **extra) -> dict:
    """A private cache holding its own shared pieces, none of them built."""
    return private_env(cache, **NO_PIECES, JIT_LOADER_SHARED_DIR="", **extra)


def load(op_dir: Path, cache: Path, **extra) -> dict:
    return json_result(run_python(LOAD, op_dir, env=env_for(cache, **extra)))


def removed(out: str, verb: str) -> list[str]:
    return re.findall(rf"^{verb} +(stable_op/\w+)", out, flags=re.M)


def two_builds(tmp_path: Path) -> tuple[Path, Path, dict, dict]:
    """Build A (factor 2), then B (factor 3), then load A again: B is the newer build, A
    the more recently used one."""
    op_dir = copy_op("stable_op", tmp_path)
    cache = tmp_path / "cache"
    a = load(op_dir, cache)
    set_factor(op_dir, 3.0)
    b = load(op_dir, cache)
    set_factor(op_dir, 2.0)
    assert load(op_dir, cache)["compiled"] is False
    return op_dir, cache, a, b


def test_doctor_and_verify_leave_last_use_alone_and_max_size_evicts_by_it(tmp_path):
    op_dir, cache, a, b = two_builds(tmp_path)
    record = (cache / "stable_op" / "usage.json").read_bytes()
    for args in (("doctor",), ("list", "--verify")):  # both hash every library
        out = run_cli(*args, env=env_for(cache), timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
    assert (cache / "stable_op" / "usage.json").read_bytes() == record

    entry_b = cache / "stable_op" / "builds" / b["key"]
    one = sum(f.stat().st_size for f in entry_b.rglob("*") if f.is_file())
    total = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    bound = str(total - one // 2)
    dry = run_cli("clean", "--max-size", bound, "-n", env=env_for(cache), timeout=600)
    real = run_cli("clean", "--max-size", bound, env=env_for(cache), timeout=600)
    assert dry.returncode == 0 and real.returncode == 0, dry.stderr + real.stderr
    # The least recently loaded goes (B, though built last); the dry run said so, and
    # what it would free is what the real run freed.
    assert removed(dry.stdout, "would remove") == removed(real.stdout, "removed") == [f"stable_op/{b['key']}"]
    freed = re.search(r"freed (.+)$", real.stdout, flags=re.M).group(1)
    assert f"dry run: would free {freed}" in dry.stdout
    assert not entry_b.exists() and (cache / "stable_op" / "builds" / a["key"]).is_dir()


def test_a_bound_below_what_is_never_evicted_says_so(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    cache = tmp_path / "cache"
    load(op_dir, cache)
    piece = cache / "_shared" / "pch-0123456789abcdef"  # a precompiled header set's size
    piece.mkdir(parents=True)
    (piece / "jit_loader_stable.h.gch").write_bytes(b"x" * 300_000)
    (piece / "ok").write_text("1.0\n")

    out = run_cli("clean", "--max-size", "100K", env=env_for(cache), timeout=600)
    assert out.returncode == 0, out.stderr
    assert "removed       stable_op/" in out.stdout  # the builds go, as asked
    assert "100K is below what --max-size never removes" in out.stdout
    assert "shared pieces 300.0 kB" in out.stdout and piece.is_dir()

    set_factor(op_dir, 4.0)  # a build with JIT_LOADER_MAX_SIZE below the pieces: told once
    env = env_for(cache, JIT_LOADER_MAX_SIZE="100K")
    built = run_python(LOAD, op_dir, env=env)
    assert json_result(built)["y"] == [4.0] * 3
    warnings = [l for l in built.stderr.splitlines() if "cannot be met" in l]
    assert len(warnings) == 1 and "shared pieces 0.3 MB" in warnings[0], built.stderr


def test_a_same_named_op_of_another_folder_has_its_own_builds_and_budget(tmp_path):
    """As notebook 02 does: a copy of an op in another folder, loaded under the same name.
    ``list`` keeps the op's own current build marked, invents no ``load(name=...,
    sources=[...])`` call, names the copy's folder; the copy's builds do not count in the
    op's JIT_LOADER_KEEP; ``list OP`` shows that op alone."""
    here = copy_op("stable_op", tmp_path / "here")
    there = copy_op("stable_op", tmp_path / "there")
    set_factor(there, 4.0)
    cache = tmp_path / "cache"
    own = load(here, cache, JIT_LOADER_KEEP="1")
    copy = load(there, cache, JIT_LOADER_KEEP="1")
    assert own["key"] != copy["key"]

    out = run_cli("list", here, env=env_for(cache), timeout=600)
    assert out.returncode == 0, out.stderr
    assert f"a new process loads build {own['key']} (cached, no compile)" in out.stdout
    assert f"* {own['key']}" in out.stdout and "load(name=" not in out.stdout
    (copy_line,) = [l for l in out.stdout.splitlines() if copy["key"] in l]
    assert f"from {there}" in copy_line and not copy_line.lstrip().startswith("*")
    named = run_cli("list", "stable_op", "--json", env=env_for(cache), timeout=600)
    assert [op["name"] for op in json.loads(named.stdout)["ops"]] == ["stable_op"]

    set_factor(here, 5.0)  # a second build of this folder: its first goes, the copy's stays
    newer = load(here, cache, JIT_LOADER_KEEP="1")
    builds = sorted(p.name for p in (cache / "stable_op" / "builds").iterdir())
    assert builds == sorted([newer["key"], copy["key"]])
