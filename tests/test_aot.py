"""The ahead-of-time build (deploy/setup.py): a wheel whose ops import like the source
tree, register under the same namespaces and pass the op's own tests, with nothing
compiled at import.

CI builds one small op (sigmoid, CPU only) to bound its time; the GPU run builds every op
with CUDA and runs all op tests with ``JIT_LOADER_PREBUILT=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import jit_loader
from jit_tools import abi, prebuilt
from subproc import child_env, run_interpreter, run_python

ROOT = Path(jit_loader.REPO_ROOT)
OP = "sigmoid"

pytestmark = pytest.mark.slow


def _env(**extra) -> dict:
    """Only what is installed importable, the prebuilt mode unset unless given."""
    return child_env(PYTHONPATH=None, **{prebuilt.ENV: None, **extra})


@pytest.fixture(scope="module")
def wheel(once) -> Path:
    def make(out: Path) -> Path:
        env = _env(OPS=OP, WITH_CUDA="0", AOT_BUILD_DIR=str(out / "build"),
                   MAX_JOBS=os.environ.get("MAX_JOBS", "1"))
        built = run_interpreter("-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                                "-q", ROOT / "deploy", "-w", out / "dist", env=env)
        assert built.returncode == 0, built.stdout + built.stderr
        (path,) = (out / "dist").glob("*.whl")
        return path

    return once("aot_wheel", make)


@pytest.fixture(scope="module")
def site(wheel, once) -> Path:
    """The wheel installed into a folder of its own, with the op's tests beside it (the
    tests put their parent folder first on sys.path, so `import ops` finds the wheel)."""
    def make(target: Path) -> Path:
        installed = run_interpreter("-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                    "--target", target, wheel, env=_env())
        assert installed.returncode == 0, installed.stdout + installed.stderr
        (target / "tests").mkdir()
        for name in ("conftest.py", "pointwise_tester.py", f"test_{OP}.py"):
            shutil.copy(ROOT / "tests" / name, target / "tests" / name)
        shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")  # markers, options
        return target

    return once("aot_site", make)


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
    result = run_python(code, cwd=site, env=_env(JIT_LOADER_CACHE=str(cache), **{prebuilt.ENV: mode}))
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
                             env=_env(JIT_LOADER_CACHE=str(cache), **{prebuilt.ENV: "1"}))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
    assert not cache.exists(), "a JIT build ran"
