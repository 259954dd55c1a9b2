"""Bundles (``python -m jit_loader pack`` / ``unpack``): the builds some ops need in one
file, verified as it installs as a cache layer, and the cluster recipe end to end: pack,
unpack elsewhere, then a process with ``JIT_LOADER_COMPILE=never`` and no compiler on
``PATH`` loads every bundled op and passes its check cases.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from jit_tools import sources
from subproc import child_env, json_result, private_env, run_cli, run_python
from toy_ops import LOAD, NO_PIECES, copy_op


@pytest.fixture(scope="module")
def packed(once):
    """The tiny stable op packed by name into a fresh cache (so pack builds it first)."""
    def make(base: Path):
        op_dir = copy_op("stable_op", base)
        env = private_env(base / "cache", **NO_PIECES)
        out = run_cli("pack", base / "ops.tar.gz", op_dir, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        (key,) = [p.name for p in (base / "cache" / "stable_op" / "builds").iterdir()]
        return base, op_dir, base / "ops.tar.gz", key

    return once("bundle_packed", make)


def test_pack_records_what_each_key_names_and_unpack_installs_a_layer(packed, tmp_path):
    base, op_dir, archive, key = packed
    with tarfile.open(archive) as tar:
        assert tar.getnames()[0] == "bundle.json"
        index = json.loads(tar.extractfile("bundle.json").read())
    (build,) = index["builds"]
    assert (build["op"], build["key"], build["abi"]) == ("stable_op", key, "stable")
    config = build["inputs"]["config"]
    assert config["torch"] == "stable>=2.11" and "-DTORCH_TARGET_VERSION" in config["cflags"][0]
    assert dict(build["inputs"]["files"]) == {
        name: sources.sha256(op_dir / name) for name in ("stable_op.cpp", "stable_op.h")}
    library = base / "cache" / "stable_op" / "builds" / key / "stable_op.so"
    assert build["files"][f"stable_op/builds/{key}/stable_op.so"]["sha256"] == sources.sha256(library)

    layer, local = tmp_path / "layer", tmp_path / "local"
    env = private_env(local, **NO_PIECES)
    out = run_cli("unpack", archive, "--into", layer, env=env)
    assert out.returncode == 0, out.stderr
    assert f"installed  stable_op/{key}" in out.stdout
    again = run_cli("unpack", archive, "--into", layer, env=env)  # idempotent: the intact build stays
    assert f"kept       stable_op/{key}" in again.stdout

    node = private_env(Path(f"{layer}{os.pathsep}{local}"), **NO_PIECES, JIT_LOADER_COMPILE="never")
    r = json_result(run_python(LOAD, op_dir, env=node))
    assert r == {"compiled": False, "key": key, "y": [2.0] * 3, "origin": f"bundle ops (layer {layer})"}
    listing = run_cli("list", op_dir, env=node)
    assert f"* {key}" in listing.stdout and f"in bundle ops (layer {layer})" in listing.stdout


def _rewrite(archive: Path, out: Path, change) -> None:
    """``archive`` copied member by member to ``out``; ``change(info, data)`` may return
    another (info, data), or None to drop the member."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for info in src.getmembers():
            data = src.extractfile(info).read()
            changed = change(info, data)
            if changed is not None:
                new_info, new_data = changed
                new_info.size = len(new_data)
                dst.addfile(new_info, io.BytesIO(new_data))


def _refused(archive: Path, into: Path) -> str:
    out = run_cli("unpack", archive, "--into", into, env=private_env(into.parent / "w"))
    assert out.returncode == 1 and out.stdout == "", out.stdout + out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"unpack: refused {archive}: ")
    assert not (into / "stable_op").exists() and not list(into.glob(".tmp-*"))  # nothing installed
    return line


def test_tampered_truncated_or_unsafe_bundles_are_refused_and_install_nothing(packed, tmp_path):
    _base, _op_dir, archive, key = packed
    library = f"stable_op/builds/{key}/stable_op.so"
    into = tmp_path / "layer"

    tampered = tmp_path / "tampered.tar.gz"
    _rewrite(archive, tampered, lambda i, d: (i, d[:100] + bytes([d[100] ^ 1]) + d[101:])
             if i.name == library else (i, d))
    assert f"{library}: its bytes differ from the sha256 in bundle.json" in _refused(tampered, into)

    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[:archive.stat().st_size // 2])
    assert "truncated or damaged at" in _refused(truncated, into)

    def escape(info, data):  # a member that would land outside the folder, listed as such
        if info.name == "bundle.json":
            index = json.loads(data)
            index["builds"][0]["files"]["../../escaped.so"] = {"sha256": "0" * 64, "size": 1}
            return info, json.dumps(index).encode()
        return info, data
    unsafe = tmp_path / "unsafe.tar.gz"
    _rewrite(archive, unsafe, escape)
    assert "../../escaped.so: not a path a bundle may hold" in _refused(unsafe, into)
    assert not (tmp_path / "escaped.so").exists()

    def link(info, data):  # the library replaced by a link to a file of the machine
        if info.name == library:
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            return info, b""
        return info, data
    linked = tmp_path / "linked.tar.gz"
    _rewrite(archive, linked, link)
    assert f"{library}: not a file its bundle.json lists" in _refused(linked, into)

    missing = tmp_path / "missing.tar.gz"
    _rewrite(archive, missing, lambda i, d: None if i.name == library else (i, d))
    assert f"{library}: listed in bundle.json but not in the archive" in _refused(missing, into)


LATER_TORCH = """
    import json, sys, torch
    torch.__version__ = "2.99.0"  # a later torch release than the one that built the bundle
    import jit_loader
    try:
        op = jit_loader.load(sys.argv[1])
        print(json.dumps({"compiled": op.build.compiled, "origin": op.build.origin}))
    except jit_loader.JitLoaderError as e:
        print(json.dumps({"error": str(e)}))
"""


def test_a_stable_bundle_serves_a_later_torch_and_an_aten_one_says_why_not(packed, tmp_path):
    base, op_dir, archive, key = packed
    aten_dir = copy_op("toy_op", tmp_path)
    aten = tmp_path / "aten.tar.gz"
    assert run_cli("pack", aten, aten_dir, env=private_env(tmp_path / "cache")).returncode == 0
    layer = tmp_path / "layer"
    for bundle in (archive, aten):
        assert run_cli("unpack", bundle, "--into", layer, env=private_env(tmp_path / "w")).returncode == 0
    node = private_env(Path(f"{layer}{os.pathsep}{tmp_path / 'local'}"), JIT_LOADER_COMPILE="never")
    stable = json_result(run_python(LATER_TORCH, op_dir, env=node))
    assert stable == {"compiled": False, "origin": f"bundle ops (layer {layer})"}
    refused = json_result(run_python(LATER_TORCH, aten_dir, env=node))["error"]
    assert "op 'toy_op': JIT_LOADER_COMPILE=never" in refused
    assert f"differs in its torch version ('{torch.__version__}' there, '2.99.0' here)" in refused


CLUSTER_NODE = """
    import json, sys, time
    import torch, jit_loader
    out = {}
    for name in sys.argv[1:]:
        started = time.perf_counter()
        op = jit_loader.load(name)
        seconds = time.perf_counter() - started
        # Each case against the reference, opcheck and torch.compile (aot_eager: inductor
        # would need a compiler). No gradcheck: the op tests gradcheck these same builds,
        # and here it would take minutes (scatter's alone) to say nothing about delivery.
        results = jit_loader.check_op(op, "cpu", compile_backend="aot_eager", gradcheck=False,
                                      verbose=False)
        out[name] = {"compiled": op.build.compiled, "origin": op.build.origin, "seconds": seconds,
                     "failed": [r.summary() for r in results if not r]}
    print(json.dumps(out))
"""


def test_cluster_recipe_every_bundled_op_without_a_compiler(tmp_path):
    """Pack every bundled op in the suite's main cache (its builds, where the op tests made
    them), unpack the bundle elsewhere, and load each op in a process that may not
    compile and has no compiler on PATH: none compiles, each passes its check cases, and
    the loader says at most one line per op."""
    ops = sources.available_ops()
    archive = tmp_path / "cluster.tar.gz"
    packed = run_cli("pack", archive, *ops, env=child_env(), timeout=3600)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    layer, local = tmp_path / "layer", tmp_path / "local"
    assert run_cli("unpack", archive, "--into", layer, env=private_env(local)).returncode == 0

    bin_dir = tmp_path / "bin"  # python and nothing else: no g++, c++, nvcc or ninja
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    # The arch list of the pack above (this process's), so the keys are the bundle's.
    env = child_env(JIT_LOADER_CACHE=f"{layer}{os.pathsep}{local}", JIT_LOADER_SHARED_NOW=None,
                    CXX=None, CC=None, PATH=str(bin_dir), JIT_LOADER_COMPILE="never",
                    JIT_LOADER_SHARED_DIR="")
    node = run_python(CLUSTER_NODE, *ops, env=env, timeout=3600)
    result = json_result(node)
    for name in ops:
        assert result[name]["compiled"] is False
        assert result[name]["origin"] == f"bundle cluster (layer {layer})"
        assert result[name]["failed"] == [], result[name]
    said = [line for line in node.stderr.splitlines() if line.startswith("jit_loader:")]
    assert len(said) <= len(ops), said
    assert not (local / "_shared").exists() and not list(local.glob("*/work-*"))

    # A node whose CUDA toolkit has no nvcc at all: its key would leave CUDA out, yet it
    # can build nothing, so it takes the bundle's CUDA builds (their .cu files the same).
    no_nvcc = tmp_path / "toolkit-without-nvcc"
    no_nvcc.mkdir()
    loads = run_python(NODE_WITHOUT_NVCC, *ops, env=dict(env, CUDA_HOME=str(no_nvcc)), timeout=900)
    assert json_result(loads) == {name: [False, True] for name in ops}


NODE_WITHOUT_NVCC = """
    import json, sys, jit_loader
    assert jit_loader.cuda_home() is None
    ops = {name: jit_loader.load(name) for name in sys.argv[1:]}
    print(json.dumps({name: [op.build.compiled, op.build.with_cuda] for name, op in ops.items()}))
"""


def test_a_build_of_an_older_loader_is_packed_with_what_its_key_names(packed, tmp_path):
    base, op_dir, _archive, key = packed
    cache = tmp_path / "cache"
    shutil.copytree(base / "cache", cache)
    manifest_file = cache / "stable_op" / "builds" / key / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    record = manifest.pop("inputs")  # as a loader before the record wrote it
    manifest_file.write_text(json.dumps(manifest))
    out = run_cli("pack", tmp_path / "old.tar.gz", op_dir, env=private_env(cache, **NO_PIECES))
    assert out.returncode == 0, out.stderr
    with tarfile.open(tmp_path / "old.tar.gz") as tar:
        packed_manifest = json.loads(tar.extractfile(f"stable_op/builds/{key}/manifest.json").read())
        index = json.loads(tar.extractfile("bundle.json").read())
    assert packed_manifest["inputs"] == record == index["builds"][0]["inputs"]
    assert packed_manifest["sha256"] == manifest["sha256"]  # the same library
