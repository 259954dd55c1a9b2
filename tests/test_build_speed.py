"""The shared build pieces: the precompiled header set, the linker probe, ccache.

Each scenario builds tiny fixture ops in new interpreters with a private cache, shared
by the tests of this file so the pieces are built once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from jit_tools.builder import ninja_file, shared, speedups, toolchain
from jit_tools.store import CacheStore
from subproc import ROOT, json_result, private_env, run_python
from toy_ops import LOAD_AND_SCALE, copy_op, set_factor


@pytest.fixture(autouse=True)
def pieces_in_the_cache(monkeypatch):
    """These tests check the default layout, the pieces in ``<cache>/_shared`` (the
    test session otherwise points every cache at one folder of pieces)."""
    monkeypatch.delenv("JIT_LOADER_SHARED_DIR", raising=False)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shared_cache")


def manifest_of(cache: Path, name: str, key: str) -> dict:
    return json.loads((cache / name / "builds" / key / "manifest.json").read_text())


def work_folder(cache: Path, name: str, op_dir: Path) -> Path:
    for work in (cache / name).glob("work-*"):
        if f"-I{op_dir} " in (work / "build.ninja").read_text():
            return work
    raise AssertionError(f"no work folder of {op_dir} in {cache / name}")


def build_ninja(cache: Path, name: str, op_dir: Path) -> str:
    """The op's build.ninja, with the options file of the precompiled header (which its
    C++ units read, ninja_file.PIECES_RSP) appended."""
    work = work_folder(cache, name, op_dir)
    return (work / "build.ninja").read_text() + (work / ninja_file.PIECES_RSP).read_text()


def pieces(cache: Path) -> dict[str, float]:
    """Each shared piece's output file and its modification time."""
    out = {}
    for piece in CacheStore(cache).shared_folder().iterdir():
        for f in list(piece.glob("*.o")) + list(piece.glob("*.gch")):
            out[str(f)] = f.stat().st_mtime_ns
    return out


def test_second_op_reuses_the_precompiled_header(cache, tmp_path):
    first = copy_op("toy_op", tmp_path / "a")
    r1 = json_result(run_python(LOAD_AND_SCALE.format(path=str(first)), cache=cache))
    assert r1["compiled"] and r1["y"] == [2.0, 2.0, 2.0]
    used = manifest_of(cache, "toy_op", r1["key"])["shared"]
    assert used["pch"] == toolchain.is_gcc("c++")
    before = pieces(cache)
    assert any(p.endswith(".gch") for p in before) == used["pch"]

    second = copy_op("toy_op", tmp_path / "b")
    set_factor(second, 3.0)
    r2 = json_result(run_python(LOAD_AND_SCALE.format(path=str(second)), cache=cache))
    assert r2["compiled"] and r2["y"] == [3.0, 3.0, 3.0]
    assert manifest_of(cache, "toy_op", r2["key"])["shared"] == used
    assert pieces(cache) == before  # nothing of the shared pieces was built again
    ninja = build_ninja(cache, "toy_op", second)
    # The op's own unit is all that compiles: the loader's entry points come with the
    # force-included registry header.
    assert re.findall(r"^build (\S+\.o): ", ninja, re.M) == ["toy_op.o"], ninja
    if used["pch"]:
        assert "-Winvalid-pch" in ninja and speedups.PCH_HEADER in ninja


def test_switches_turn_pch_and_ccache_off(cache, tmp_path):
    op_dir = copy_op("toy_op", tmp_path / "off")
    set_factor(op_dir, 5.0)
    env = private_env(cache, JIT_LOADER_PCH="0", JIT_LOADER_CCACHE="0")
    r = json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env))
    assert r["compiled"] and r["y"] == [5.0, 5.0, 5.0]
    used = manifest_of(cache, "toy_op", r["key"])["shared"]
    assert used["pch"] is False and used["ccache"] is False
    ninja = build_ninja(cache, "toy_op", op_dir)
    assert "ccache" not in ninja and speedups.PCH_HEADER not in ninja
    assert "-include" in ninja  # the registry header is still forced in


def test_compiler_cache_on_path_is_not_put_in_front_twice(cache, tmp_path):
    """cpp_extension (torch 2.12 on) writes ``cxx = ccache c++`` when a ccache is on
    PATH, as in an activated venv that installed ours; the loader runs its own and must
    still find the compiler to build and use the shared pieces."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ccache"
    wrapper.write_text('#!/bin/sh\nexec "$@"\n')
    wrapper.chmod(0o755)
    op_dir = copy_op("toy_op", tmp_path / "wrapped")
    set_factor(op_dir, 4.0)
    env = private_env(cache, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r = json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env))
    assert r["compiled"] and r["y"] == [4.0, 4.0, 4.0]
    used = manifest_of(cache, "toy_op", r["key"])["shared"]
    assert used["pch"] == toolchain.is_gcc("c++"), used
    cxx = re.search(r"^cxx = (.*)$", build_ninja(cache, "toy_op", op_dir), re.M).group(1)
    tokens = shlex.split(cxx)
    assert sum(os.path.basename(t) in toolchain.WRAPPERS for t in tokens) == int(used["ccache"]), cxx
    assert os.path.basename(tokens[-1]) not in toolchain.WRAPPERS, cxx


def test_first_build_of_a_flag_set_does_not_wait_for_the_shared_pieces(tmp_path):
    """By default a build compiles at once with the pieces that exist (none in a new
    cache: no precompiled header, no linker probe, no ccache), then builds the missing
    ones in the background; the next build with the same flags uses them."""
    cache = tmp_path / "cache"
    env = private_env(cache, JIT_LOADER_SHARED_NOW="0", JIT_LOADER_SHARED_DIR=None,
                      JIT_LOADER_CCACHE_DIR=None)
    first = copy_op("toy_op", tmp_path / "a")
    r1 = json_result(run_python(LOAD_AND_SCALE.format(path=str(first)), env=env))
    assert r1["compiled"] and r1["y"] == [2.0, 2.0, 2.0]
    used = manifest_of(cache, "toy_op", r1["key"])["shared"]
    assert not used["pch"] and not used["ccache"], used
    assert speedups.PCH_HEADER not in build_ninja(cache, "toy_op", first)
    # ccache is on the command line (so that it does not change once the pieces exist) but
    # switched off: it made no store.
    cxx = re.search(r"^cxx = (.*)$", build_ninja(cache, "toy_op", first), re.M).group(1)
    assert (toolchain.unwrap(cxx) != cxx) == (speedups.ccache() is not None), cxx
    assert not (cache / "_ccache").exists()
    # No probe yet: the link tries gold and falls back to the default linker.
    assert used["linker"] == ("gold, else default" if toolchain.is_gcc("c++") else "default"), used
    if toolchain.is_gcc("c++") and shutil.which("ld.gold"):
        # Gold where it links this op here: the rule's gold half run again by hand (some
        # toolchains' gold stops where the default linker goes on, e.g. at a libstdc++.so
        # development link that points nowhere; there the default linker made the library).
        work = work_folder(cache, "toy_op", first)
        text = (work / "build.ninja").read_text()
        cxx, ldflags = (re.search(rf"^{var} = (.*)$", text, re.M).group(1) for var in ("cxx", "ldflags"))
        cxx = toolchain.unwrap(cxx)
        gold_links = subprocess.run(f"{cxx} toy_op.o -fuse-ld=gold {ldflags} -o gold-try.so", shell=True,
                                    cwd=work, capture_output=True).returncode == 0
        (library,) = (cache / "toy_op" / "builds" / r1["key"]).glob("*.so")
        notes = subprocess.run(["readelf", "-n", str(library)], capture_output=True, text=True).stdout
        assert ("gold" in notes) == gold_links, notes
    if toolchain.is_gcc("c++"):
        assert any(name.startswith("pch-") for name in used["later"]), used
        assert any(name.startswith("link-") for name in used["later"]), used
    # Only the op's unit compiles (nothing of the loader's beside it).
    assert re.findall(r"^build (\S+\.o): ", build_ninja(cache, "toy_op", first), re.M) == ["toy_op.o"]
    # The background process builds them under their locks; wait for it.
    deadline = time.monotonic() + 600
    while not all((CacheStore(cache).shared_folder() / name / "ok").exists()
                  or (CacheStore(cache).shared_folder() / name / shared.FAILED).exists()
                  for name in used["later"]):
        assert time.monotonic() < deadline, sorted(os.listdir(CacheStore(cache).shared_folder()))
        time.sleep(1)
    second = copy_op("toy_op", tmp_path / "b")
    set_factor(second, 3.0)
    r2 = json_result(run_python(LOAD_AND_SCALE.format(path=str(second)), env=env))
    assert r2["compiled"] and r2["y"] == [3.0, 3.0, 3.0]
    used = manifest_of(cache, "toy_op", r2["key"])["shared"]
    assert used["pch"] == toolchain.is_gcc("c++") and "later" not in used, used
    assert used["ccache"] == (speedups.ccache() is not None), used


LOAD_STABLE_WITH = """
    import json, sys, torch, jit_loader
    op = jit_loader.load({path!r}, extra_cflags={flags!r})
    y = torch.ops.stable_op.scale(torch.ones(3))
    print(json.dumps({{"compiled": op.build.compiled, "key": op.build.key, "y": y.tolist()}}))
"""


@pytest.mark.skipif(not toolchain.is_gcc("c++"), reason="GCC's precompiled headers")
def test_a_flag_set_that_adds_macros_uses_the_header_set_built_without_them(tmp_path):
    """``extra_cflags=["-DVARIANT_A"]`` on top of flags whose header set is built compiles
    with that header at once (GCC checks that no macro it reads changed) instead of
    going without one and building another; a macro the header set reads (``NDEBUG``,
    read by <cassert>) makes GCC read the text, and the exact header follows in the
    background as for any new flag set."""
    cache = tmp_path / "cache"
    env = private_env(cache, JIT_LOADER_SHARED_DIR=None)
    first = copy_op("stable_op", tmp_path / "a")
    r0 = json_result(run_python(LOAD_STABLE_WITH.format(path=str(first), flags=[]),
                                env=dict(env, JIT_LOADER_SHARED_NOW="1")))
    base = manifest_of(cache, "stable_op", r0["key"])["shared"]
    assert base["pch"] is True, base
    headers = {p.parent.name for p in CacheStore(cache).shared_folder().glob("pch-*/*.gch")}
    assert len(headers) == 1, headers

    env = dict(env, JIT_LOADER_SHARED_NOW="0")
    variant = copy_op("stable_op", tmp_path / "b")
    r1 = json_result(run_python(LOAD_STABLE_WITH.format(path=str(variant), flags=["-DVARIANT_A"]), env=env))
    assert r1["compiled"] and r1["y"] == [2.0, 2.0, 2.0] and r1["key"] != r0["key"]
    used = manifest_of(cache, "stable_op", r1["key"])["shared"]
    assert used["pch"] is True and used["pch_sibling"] in headers, used
    assert "pch_sibling_refused" not in used, used  # GCC used it
    assert not any(n.startswith("pch-") for n in used.get("later", [])), used
    assert "-DVARIANT_A" in build_ninja(cache, "stable_op", variant)

    conflict = copy_op("stable_op", tmp_path / "c")
    r2 = json_result(run_python(LOAD_STABLE_WITH.format(path=str(conflict), flags=["-DNDEBUG"]), env=env))
    assert r2["compiled"] and r2["y"] == [2.0, 2.0, 2.0]
    used = manifest_of(cache, "stable_op", r2["key"])["shared"]
    assert used["pch_sibling"] in headers and used["pch_sibling_refused"] is True, used
    assert any(n.startswith("pch-") and n not in headers for n in used["later"]), used


@pytest.mark.skipif(not toolchain.is_gcc("c++"), reason="GCC's -fuse-ld")
def test_a_first_link_where_gold_fails_links_with_the_default_linker(tmp_path):
    """Before the linker probe exists the link tries gold; a gold that fails (here one
    that exits 1, found first on the compiler's program path) leaves the default
    linker's link, and the op works (without the precompiled header and ccache, which the
    test does not use: the load would start building the header set in the background)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ld.gold").write_text("#!/bin/sh\necho 'gold: broken' >&2\nexit 1\n")
    (tools / "ld.gold").chmod(0o755)
    cache = tmp_path / "cache"
    env = private_env(cache, JIT_LOADER_SHARED_NOW="0", JIT_LOADER_SHARED_DIR=None,
                      JIT_LOADER_PCH="0", JIT_LOADER_CCACHE="0", COMPILER_PATH=str(tools))
    r = json_result(run_python(LOAD_AND_SCALE.format(path=str(copy_op("toy_op", tmp_path / "a"))), env=env))
    assert r["compiled"] and r["y"] == [2.0, 2.0, 2.0]
    assert manifest_of(cache, "toy_op", r["key"])["shared"]["linker"] == "gold, else default"
    (library,) = (cache / "toy_op" / "builds" / r["key"]).glob("*.so")
    notes = subprocess.run(["readelf", "-n", str(library)], capture_output=True, text=True).stdout
    assert "gold" not in notes, notes


@pytest.mark.parametrize("command, compiler", [
    ("c++", "c++"), ("ccache c++", "c++"), ("/usr/bin/sccache ccache g++-13", "g++-13"),
    ("ccache", "ccache"), ("'/opt/my cc/g++' -m64", "'/opt/my cc/g++' -m64")])
def test_unwrap_drops_only_leading_compiler_caches(command, compiler):
    assert toolchain.unwrap(command) == compiler


REVERT_THEN_EDIT = """
    import json, subprocess, sys, torch, jit_loader
    from pathlib import Path
    op_dir = Path({path!r})
    ccache = [{ccache!r}]
    helper, header = op_dir / "helper.cpp", op_dir / "toy_op.h"
    op = jit_loader.load(op_dir)
    original = helper.read_text()
    helper.write_text(original.replace("return 1;", "return 2;"))
    op.reload()
    helper.write_text(original)  # revert: served from the cache
    op.reload()
    reverted_compiled = op.build.compiled
    subprocess.run(ccache + ["-z"], check=True, capture_output=True)
    header.write_text(header.read_text().replace("kFactor = 2.0;", "kFactor = 7.0;"))
    op.reload()
    stats = dict(line.split("\\t", 1) for line in subprocess.run(
        ccache + ["--print-stats"], check=True, capture_output=True, text=True).stdout.splitlines())
    y = torch.ops.toy_op.scale(torch.ones(2)).tolist()
    print(json.dumps({{"reverted_compiled": reverted_compiled, "compiled": op.build.compiled,
                      "miss": int(stats["cache_miss"]),
                      "hit": int(stats["direct_cache_hit"]) + int(stats["preprocessed_cache_hit"]),
                      "y": y}}))
"""


@pytest.mark.skipif(speedups.ccache() is None, reason="ccache is not installed")
def test_revert_then_edit_another_unit_compiles_only_that_unit(cache, tmp_path):
    op_dir = copy_op("toy_op", tmp_path / "two")
    (op_dir / "helper.cpp").write_text("int toy_op_helper() { return 1; }\n")
    env = private_env(cache, JIT_LOADER_CCACHE_DIR=None)  # its own store, whose counts it reads
    env["CCACHE_DIR"] = str(cache / "_ccache")
    code = REVERT_THEN_EDIT.format(path=str(op_dir), ccache=speedups.ccache())
    r = json_result(run_python(code, env=env))
    assert r["reverted_compiled"] is False
    assert r["compiled"] and r["y"] == [7.0, 7.0]
    # toy_op.cpp is compiled; helper.cpp, whose object the revert made stale, comes
    # from the compiler cache.
    assert r["miss"] == 1, r
    assert r["hit"] >= 1, r


def test_prune_removes_only_unused_pieces(tmp_path):
    old, fresh = tmp_path / "_shared" / "link-old", tmp_path / "_shared" / "pch-new"
    for piece in (old, fresh):
        piece.mkdir(parents=True)
        (piece / "ok").write_text("1\n")
    subprocess.run(["touch", "-d", "2000-01-01", str(old / "ok")], check=True)
    assert shared.prune(tmp_path) == [old]
    assert fresh.is_dir() and not old.exists()


def test_ccache_runs_in_depend_mode_with_the_headers_identity(tmp_path, monkeypatch):
    monkeypatch.delenv("JIT_LOADER_CCACHE_DIR", raising=False)  # the cache's own store
    env = speedups.ccache_env(tmp_path)
    assert env["CCACHE_DEPEND"] == "1" and env["CCACHE_PCH_EXTSUM"] == "1"
    extra = Path(env["CCACHE_EXTRAFILES"])
    assert extra.parent == tmp_path / "_ccache"
    import torch
    assert torch.__version__ in extra.read_text().splitlines()
    assert speedups.ccache_env(tmp_path)["CCACHE_EXTRAFILES"] == str(extra)  # same toolchain, same file


def test_pch_checksum_names_the_piece(tmp_path):
    gch = tmp_path / "pch-abc" / (speedups.PCH_HEADER + ".gch")
    gch.parent.mkdir()
    gch.write_bytes(b"x" * 10)
    speedups.pch_checksum(gch)
    text = (gch.parent / (gch.name + ".sum")).read_text()
    assert text.startswith("pch-abc 10 ")


@pytest.mark.parametrize("jobs, threads", [("1", 0), ("2", 2), ("16", 4)])
def test_nvcc_threads_follow_max_jobs(monkeypatch, jobs, threads):
    monkeypatch.setenv("MAX_JOBS", jobs)
    assert speedups.nvcc_threads() == threads


def test_linker_probe_and_switch(cache, tmp_path, monkeypatch):
    op_dir = copy_op("toy_op", tmp_path / "link")
    set_factor(op_dir, 4.0)
    r = json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), cache=cache))
    assert r["y"] == [4.0, 4.0, 4.0]
    used = manifest_of(cache, "toy_op", r["key"])["shared"]
    probes = list(CacheStore(cache).shared_folder().glob("link-*"))
    assert probes, "the linker probe ran"
    gold = any((p / "ok").exists() for p in probes)
    assert used["linker"] == ("gold" if gold else "default")
    assert ("-fuse-ld=gold" in build_ninja(cache, "toy_op", op_dir)) == gold
    monkeypatch.setenv("JIT_LOADER_GOLD", "0")
    assert speedups.fast_linker(cache, "c++", "-shared") == []


@pytest.mark.skipif(shutil.which("ld.gold") is None or not toolchain.is_gcc("c++"),
                    reason="needs GCC and gold")
def test_gold_probe_gets_past_a_dangling_libstdcxx_link(tmp_path, monkeypatch):
    """A toolchain whose libstdc++.so points nowhere (GNU ld passes over it, gold stops
    there): the probe links with a libstdc++.so of its own, and an op links with gold."""
    monkeypatch.delenv("JIT_LOADER_GOLD", raising=False)
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / "libstdc++.so").symlink_to(tmp_path / "missing" / "libstdc++.so.6")
    compiler = tmp_path / "bin" / "g++"
    compiler.parent.mkdir()
    # Searched after every -L of the command line, as a compiler's own library folder is.
    compiler.write_text(f'#!/bin/sh\nexec c++ "$@" -L{dangling}\n')
    compiler.chmod(0o755)
    obj = tmp_path / "unit.o"
    (tmp_path / "unit.cpp").write_text("#include <string>\nstd::string unit() { return \"x\"; }\n")
    subprocess.run(["c++", "-fPIC", "-c", str(tmp_path / "unit.cpp"), "-o", str(obj)], check=True)
    ldflags = "-shared -l:libstdc++.so.6"
    plain = subprocess.run([str(compiler), "-fuse-ld=gold", str(obj), *shlex.split(ldflags), "-o",
                            str(tmp_path / "plain.so")], capture_output=True, text=True)
    assert plain.returncode != 0 and "libstdc++.so" in plain.stderr  # the failure reproduced
    flags = speedups.fast_linker(tmp_path / "cache", str(compiler), ldflags)
    assert flags[0] == "-fuse-ld=gold" and flags[1].startswith("-L"), flags
    out = tmp_path / "op.so"
    subprocess.run([str(compiler), *flags, str(obj), *shlex.split(ldflags), "-o", str(out)], check=True)
    needed = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True).stdout
    assert "libstdc++.so.6" in needed
    # The piece is reused: a second call answers from it.
    assert speedups.fast_linker(tmp_path / "cache", str(compiler), ldflags) == flags


FIRST_USE = """
    import json, os, sys, time, torch, jit_loader
    from pathlib import Path
    from jit_tools import _torch_private, abi, store
    from jit_tools.builder.process_pieces import autograd_piece, building, fastcall_piece
    op = jit_loader.load(sys.argv[1])
    module = op.module
    forward = module._FORWARD  # the surface's fast_op object, as the surface made it

    def autograd_kernel():
        dump = _torch_private.registrations_of("sigmoid::forward").splitlines()
        return "cpp" if any("Autograd" in l and "jit_loader_autograd.cpp" in l for l in dump) else "python"

    out = {"fast at first": _torch_private.fast_call_of(forward) is not None,
           "autograd at first": autograd_kernel(),
           "building": [building(fastcall_piece), building(autograd_piece)]}
    folder = store.current().shared_folder()
    deadline = time.monotonic() + 900
    while building(fastcall_piece) or building(autograd_piece) or len(list(folder.glob("pch-*/ok"))) < 2:
        assert time.monotonic() < deadline, sorted(os.listdir(folder))
        time.sleep(0.5)
    while _torch_private.fast_call_of(forward) is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the thread that watched the build gives the object its entry
    x = torch.randn(8, requires_grad=True)
    out["fast once built"] = _torch_private.fast_call_of(forward) is not None
    out["same object"] = module._FORWARD is forward
    out["call"] = torch.allclose(op.sigmoid(x), torch.sigmoid(x))
    out["autograd once built"] = autograd_kernel()
    out["reloaded"] = op.reload()  # nothing was edited: the surface takes the pieces up
    out["autograd after the reload"] = autograd_kernel()
    out["fast after the reload"] = _torch_private.fast_call_of(module._FORWARD) is not None
    op.sigmoid(x).sum().backward()
    out["grad"] = torch.allclose(x.grad, torch.sigmoid(x) * (1 - torch.sigmoid(x)))
    out["headers"] = sorted(json.loads((p.parent / "flags.json").read_text())["flags"].count(
        abi.TARGET_FLAG) for p in folder.glob("pch-*/ok"))
    print(json.dumps(out))
"""


@pytest.mark.skipif(not toolchain.is_gcc("c++") or speedups.ccache() is None,
                    reason="GCC's precompiled headers and ccache")
def test_the_first_load_starts_every_piece_and_the_process_takes_them_up(tmp_path):
    """In a new cache, with the default background builds: the first load of an op starts
    the pieces an edit or a call needs (the precompiled headers of both ABIs, the fast
    entry, the C++ autograd kernel) and goes on without them; once they are built, the
    same process's fast_op object calls through the fast entry without running the surface
    again, and the next load registers the C++ autograd kernel."""
    op_dir = tmp_path / "sigmoid"
    shutil.copytree(ROOT / "ops" / "sigmoid", op_dir,
                    ignore=shutil.ignore_patterns("__pycache__", "_C*"))
    env = private_env(tmp_path / "cache", JIT_LOADER_SHARED_NOW="0", JIT_LOADER_SHARED_DIR=None,
                      CUDA_HOME=str(tmp_path / "no_cuda"), JIT_LOADER_PREBUILT="0")
    r = json_result(run_python(FIRST_USE, op_dir, env=env))
    assert r["fast at first"] is False and r["autograd at first"] == "python", r
    assert r["building"] == [True, True], r
    assert r["fast once built"] and r["same object"] and r["call"], r
    assert r["autograd once built"] == "python", r  # registered at the next load
    assert r["reloaded"] and r["autograd after the reload"] == "cpp" and r["fast after the reload"], r
    assert r["grad"], r
    assert r["headers"] == [0, 1], r  # the ATen header set and the stable one


def test_the_other_abis_header_set_is_made_with_that_abis_flags(tmp_path):
    """What the background build of a flag set's pieces adds for the other ABI is the
    header set an op of that ABI with the same options uses: sigmoid (stable) and lltm
    (ATen), their flags as torch composes them."""
    from jit_tools import abi, key as keys, sources

    flags = {}
    for name in ("sigmoid", "lltm"):
        op_dir = sources.resolve_op_dir(name)
        _key, config, compiled, _inputs = keys.compute_key(name, op_dir, {})
        (tmp_path / name).mkdir()
        torch_flags = ninja_file.torch_flags(name, config, compiled, tmp_path / name)
        flags[name] = speedups.pch_flags(torch_flags.cflags, name, [op_dir])
    assert abi.TARGET_FLAG in flags["sigmoid"] and flags["sigmoid"] != flags["lltm"]
    assert speedups.other_abi(flags["sigmoid"]) == (flags["lltm"], speedups.ATEN_HEADERS)
    assert speedups.other_abi(flags["lltm"]) == (flags["sigmoid"], speedups.STABLE_HEADERS)
    assert speedups.STABLE_HEADERS.text == abi.STABLE_PCH_TEXT


def test_plain_units_are_told_apart_from_units_reaching_torch(tmp_path):
    """A C++ unit that reaches no torch header and registers nothing is plain C++; an op
    of plain units alone keeps the registry header in its first (the loader's entry points)."""
    from jit_tools import sources

    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "uses_aten.h").write_text("#pragma once\n#include <ATen/ATen.h>\n")
    (tmp_path / "inc" / "plain.h").write_text("#pragma once\n#include <cstdint>\n")
    units = {"plain.cpp": '#include "plain.h"\nint f() { return 1; }\n',
             "through_header.cpp": '#include "plain.h"\n#include "uses_aten.h"\n',
             "registers.cpp": "STABLE_TORCH_LIBRARY_IMPL(x, CPU, m) {}\n",
             "python.cpp": "#include <Python.h>\n",
             "also_plain.cpp": "int g() { return 2; }\n"}
    for file, text in units.items():
        (tmp_path / file).write_text(text)
    free = {file: sources.torch_free(tmp_path / file, [tmp_path / "inc"]) for file in units}
    assert free == {"plain.cpp": True, "through_header.cpp": False, "registers.cpp": False,
                    "python.cpp": False, "also_plain.cpp": True}
    assert sources.dtype_slices(tmp_path / "plain.cpp") == 1
    only_plain = ninja_file.units_of([tmp_path / "plain.cpp", tmp_path / "also_plain.cpp"],
                                     [tmp_path / "inc"])
    assert only_plain == {str(tmp_path / "also_plain.cpp"): ninja_file.Unit(plain=True)}


# Per op: its CPU-loop unit, and the symbols each dtype's slice must define (nm -C).
SLICED_LOOPS = {
    "sigmoid": ("sigmoid_cpu.cpp", r"ops_common::map_cpu<sigmoid_op::(\w+), ([\w:]+)>",
                lambda dtype: {("Forward", dtype), ("Backward", dtype)}),
    "resize": ("resize_cpu.cpp", r"resize_op::(forward_cpu|backward_cpu)\((?:const )?([\w:]+) const\*",
               lambda dtype: {("forward_cpu", dtype), ("backward_cpu", dtype)}),
}


@pytest.mark.parametrize("op", sorted(SLICED_LOOPS))
def test_cpu_loop_units_compile_as_plain_cpp_one_object_per_dtype(tmp_path, op):
    """An op's CPU-loop unit compiles without the precompiled torch headers and the
    registry header, to one object per dtype side by side, each holding its dtype's loops
    only (sigmoid through cpu_loops.h's OPS_INSTANTIATE_CPU_*, resize through its own
    OPS_CPU_SLICE_k); the op's flags as torch composes them."""
    from jit_tools import key as keys, sources

    unit, pattern, expected = SLICED_LOOPS[op]
    op_dir = sources.resolve_op_dir(op)
    _key, config, compiled, _inputs = keys.compute_key(op, op_dir, {})
    flags = ninja_file.torch_flags(op, config, compiled, tmp_path)
    loops = str(op_dir / unit)
    clone = config["cpu_clone"]  # the CPU clone's define (none off x86-64)
    units_of = ninja_file.units_of(compiled, sources.include_dirs(op_dir, {}), clone)
    glue_reads_clone = bool(clone) and op == "resize"  # resize.cpp includes resize_cpu.h, which includes cpu_dispatch.h
    assert {path: unit for path, unit in units_of.items() if path != loops} == (
        {str(op_dir / f"{op}.cpp"): ninja_file.Unit(defines=tuple(clone))} if glue_reads_clone else {})
    assert units_of[loops] == ninja_file.Unit(plain=True, slices=sources.CPU_DTYPE_SLICES,
                                              defines=tuple(clone))
    spec = ninja_file.PieceSpec(root=str(tmp_path), cxx="c++", flags=[], post="", ldflags="")
    pieces = ninja_file.Pieces(spec, pch=tmp_path / "pch" / "jit_loader_stable.h", nvcc="nvcc")
    ninja_file.write(tmp_path, op, flags, pieces, [], units_of)
    text = (tmp_path / "build.ninja").read_text()
    blocks = re.findall(r"^build (\S+): compile (\S+)\n(?:  cflags = (.*)\n)?", text, re.M)
    stem = unit.removesuffix(".cpp")
    own = {obj: cflags for obj, source, cflags in blocks if source == loops}
    assert sorted(own) == [f"{stem}.slice{k}.o" for k in range(4)], text
    registry = str(keys.registry_header(config))
    for k in range(4):
        line = own[f"{stem}.slice{k}.o"]
        assert line.endswith(" ".join([*clone, f"-DOPS_CPU_SLICE={k}"])) and "-O3" in line, line
        assert ninja_file.PIECES_RSP not in line and registry not in line, line
    # The op's own flags (the header set and the registry header), without the CPU clone's
    # define where the unit does not read it: the same object on every CPU capability.
    (glue,) = [cflags for obj, source, cflags in blocks if obj == f"{op}.o"]
    assert "OPS_CPU_CLONE" not in re.search(r"^cflags = (.*)$", text, re.M).group(1), text
    if glue_reads_clone:
        assert glue.endswith(" ".join(clone)) and f"@{ninja_file.PIECES_RSP}" in glue, glue
    else:
        assert glue == "", text
    assert f"@{ninja_file.PIECES_RSP}" in text and registry in text
    link = re.search(rf"^build {op}\.so: link (.*)$", text, re.M).group(1).split()
    assert [o for o in link if o.startswith(stem)] == sorted(own), link
    # Each slice holds the loops of its own dtype only.
    built = subprocess.run([toolchain.ninja(), *sorted(own)], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:]
    dtypes = ["float", "double", "c10::Half", "c10::BFloat16"]
    for k, dtype in enumerate(dtypes):
        symbols = subprocess.run(["nm", "-C", "--defined-only", tmp_path / f"{stem}.slice{k}.o"],
                                 capture_output=True, text=True, check=True).stdout
        assert set(re.findall(pattern, symbols)) == expected(dtype), (k, symbols[-2000:])
