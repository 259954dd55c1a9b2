"""The ahead-of-time build (deploy/setup.py): a wheel whose ops import like the source
tree, register under the same namespaces and pass the op's own tests, with nothing
compiled at import.

The tests build three ops, CPU only, once for this module and test_deploy_runner
(tests/aot_wheel.py), and run sigmoid's tests against the wheel; the GPU run builds every
op with CUDA and runs all op tests with ``JIT_LOADER_PREBUILT=1``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import jit_loader
from jit_tools import abi, prebuilt
import aot_wheel
from subproc import run_interpreter, run_python

ROOT = Path(jit_loader.REPO_ROOT)
OP = aot_wheel.TESTED

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(once) -> Path:
    return aot_wheel.wheel(once)


@pytest.fixture(scope="module")
def site(once) -> Path:
    return aot_wheel.site(once)


def test_wheel_holds_one_library_per_op_and_the_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    libraries = [n for n in names if n.startswith(f"ops/{OP}/_C") and n.endswith(".so")]
    assert len(libraries) == 1, sorted(names)
    for name in ("jit_loader.py", "jit_tools/prebuilt.py", f"ops/{OP}/{OP}.py",
                 f"ops/{OP}/{OP}.cpp", f"ops/{OP}/_C.json", "ops/common/checks.h"):
        assert name in names
    manifest = json.loads(zipfile.ZipFile(wheel).read(f"ops/{OP}/_C.json"))
    # sigmoid is a stable-ABI op: built for the target version, not for this torch.
    assert manifest["with_cuda"] is False and manifest["abi"] == "stable"
    assert manifest["torch"] == abi.TARGET_NAME and manifest["target"] == list(abi.TARGET_VERSION)
    assert manifest["sources"] == prebuilt.source_digest(ROOT / "ops" / OP)


def test_library_links_no_python(site):
    """Loadable by a process without Python (the C++ runner): no libtorch_python."""
    library = prebuilt.library_path(site / "ops" / OP)
    needed = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
    assert "libtorch_cpu" in needed and "libtorch_python" not in needed, needed


@pytest.mark.parametrize("mode", ["auto", "1"])
def test_import_loads_prebuilt_library_without_compiling(site, tmp_path, mode):
    cache = tmp_path / "jit-cache"
    code = (
        "import torch, jit_loader\n"
        f"from ops.{OP}.{OP} import {OP}\n"
        f"op = jit_loader.load({OP!r})\n"
        "print(type(op).__name__, op.library)\n"
        "x = torch.randn(64, dtype=torch.float64)\n"
        f"torch.testing.assert_close({OP}(x), torch.sigmoid(x))\n"
        f"torch.testing.assert_close(op.ops.forward(x), torch.sigmoid(x))\n")
    result = run_python(code, cwd=site, env=aot_wheel.env(JIT_LOADER_CACHE=str(cache), **{prebuilt.ENV: mode}))
    assert result.returncode == 0, result.stderr
    kind, library = result.stdout.split()
    assert kind == "PrebuiltOp" and Path(library).parent == site / "ops" / OP
    assert not cache.exists(), "a JIT build ran"


def test_edited_source_falls_back_to_jit_in_auto_mode(site, tmp_path):
    """A prebuilt library never hides an edit: auto mode compares the sources' digest."""
    edited = tmp_path / "site"
    shutil.copytree(site, edited, symlinks=True)
    cpp = edited / "ops" / OP / f"{OP}.cpp"
    cpp.write_text(cpp.read_text() + "\n// edited\n")
    assert not prebuilt.selected(edited / "ops" / OP)
    assert prebuilt.selected(site / "ops" / OP)


def test_missing_library_is_an_error_when_required(monkeypatch, tmp_path):
    op_dir = tmp_path / "myop"
    op_dir.mkdir()
    (op_dir / "myop.cpp").write_text("// no library built\n")
    monkeypatch.setenv(prebuilt.ENV, "1")
    with pytest.raises(jit_loader.JitLoaderError, match="no prebuilt library.*build_ext --inplace"):
        prebuilt.selected(op_dir)
    monkeypatch.setenv(prebuilt.ENV, "yes")
    with pytest.raises(ValueError, match="must be 0, 1 or auto, got 'yes'"):
        prebuilt.selected(op_dir)


def test_op_tests_pass_against_the_wheel(site, tmp_path):
    cache = tmp_path / "jit-cache"
    # The wheel of this test is built without CUDA, so its op has CPU kernels only.
    result = run_interpreter("-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not cuda",
                             f"tests/test_{OP}.py", cwd=site,
                             env=aot_wheel.env(JIT_LOADER_CACHE=str(cache), **{prebuilt.ENV: "1"}))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
    assert not cache.exists(), "a JIT build ran"
