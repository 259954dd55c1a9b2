"""The toolkit installed from a wheel works outside the clone.

A wheel is built from a copy of the project, installed into a ``--target`` folder, and
used from a scratch folder that knows nothing of the clone: a bundled op (its C++
sources come from the wheel) and a user's own op folder build and run, and
``python -m jit_loader`` works. CUDA is switched off (CUDA_HOME pointing nowhere) so
the builds stay CPU-only and quick; the CUDA path is the same code as in a clone.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from subproc import ROOT, child_env, json_result, run_cli, run_interpreter, run_python
from toy_ops import FIXTURES

PROJECT_FILES = ("pyproject.toml", "README.md", "jit_loader.py", "jit_tools", "ops")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("setuptools") is None,
    reason="building the wheel offline needs setuptools in this environment")


def pip(*args, cwd: Path) -> None:
    proc = run_interpreter("-m", "pip", *args, cwd=cwd, env=child_env(PYTHONPATH=None), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The project's wheel, installed into a folder of its own; returns that folder."""
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "build")
    for name in PROJECT_FILES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-q", "-w", str(base / "dist"),
        str(src), cwd=base)
    (wheel,) = (base / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # The sources the loader compiles travel with the wheel.
    assert "jit_tools/csrc/jit_loader_registry.h" in names
    assert "jit_tools/csrc/jit_loader_stable_registry.h" in names
    assert "jit_tools/csrc/jit_loader_registry_core.h" in names
    assert "jit_tools/csrc/jit_loader_autograd.cpp" in names
    for path in (ROOT / "jit_tools" / "tools" / "templates").rglob("*.tmpl"):  # what `new` writes
        assert path.relative_to(ROOT).as_posix() in names, path
    for path in (ROOT / "ops").rglob("*"):
        if path.suffix in (".cpp", ".cu", ".h", ".cuh") and "__pycache__" not in path.parts:
            assert path.relative_to(ROOT).as_posix() in names, path
    site = base / "site"
    pip("install", "--no-deps", "--no-cache-dir", "-q", "--target", str(site), str(wheel), cwd=base)
    return site


USE_FROM_ELSEWHERE = """
    import json, sys, torch, jit_loader
    out = {"loader": jit_loader.__file__, "ops": jit_loader.available_ops()}
    sigmoid = jit_loader.load("sigmoid")
    x = torch.randn(64, dtype=torch.float64)
    out["bundled_ok"] = torch.allclose(sigmoid.sigmoid(x), torch.sigmoid(x))
    out["bundled_path"] = str(sigmoid.path)
    mine = jit_loader.load("my_ops/toy_op")
    out["user_op"] = torch.ops.toy_op.scale(torch.ones(2)).tolist()
    out["cuda"] = mine.build.with_cuda
    print(json.dumps(out))
"""


def test_wheel_installed_elsewhere_loads_bundled_and_user_ops(installed, tmp_path):
    scratch = tmp_path / "scratch"
    shutil.copytree(FIXTURES / "toy_op", scratch / "my_ops" / "toy_op")
    env = child_env(PYTHONPATH=str(installed), JIT_LOADER_CACHE=str(tmp_path / "cache"),
                    CUDA_HOME=str(tmp_path / "no_cuda"))
    out = json_result(run_python(USE_FROM_ELSEWHERE, env=env, cwd=scratch))
    assert Path(out["loader"]).parent == installed  # not the clone
    assert "sigmoid" in out["ops"]
    assert Path(out["bundled_path"]).is_relative_to(installed)
    assert out["bundled_ok"] is True
    assert out["user_op"] == [2.0, 2.0]

    cli = run_cli("list", "--json", cwd=scratch, env=env, timeout=300)
    assert cli.returncode == 0, cli.stderr
    listing = json.loads(cli.stdout)
    assert {"sigmoid", "toy_op"} <= {op["name"] for op in listing["ops"] if op["current_cached"]}
