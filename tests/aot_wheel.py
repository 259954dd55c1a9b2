"""The ahead-of-time wheel the tests share (deploy/setup.py through ``pip wheel``): gelu,
lltm and sigmoid, CPU only, built once per test run and installed into a folder of its own.
test_aot checks the wheel and runs sigmoid's tests against it; test_deploy_runner gives
its three libraries to the C++ runner.

    def test_x(once):
        path = wheel(once)                 # the .whl
        target = site(once)                # installed, with test_sigmoid.py beside it
        library = prebuilt.library_path(target / "ops" / "sigmoid")
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jit_tools import prebuilt
from subproc import ROOT, child_env, run_interpreter

OPS = ("gelu", "lltm", "sigmoid")
TESTED = "sigmoid"  # the op whose tests run against the installed wheel


def env(**extra) -> dict:
    """Only what is installed importable, the prebuilt mode unset unless given."""
    return child_env(PYTHONPATH=None, **{prebuilt.ENV: None, **extra})


def wheel(once) -> Path:
    def make(out: Path) -> Path:
        built = run_interpreter("-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                                "-q", ROOT / "deploy", "-w", out / "dist",
                                env=env(OPS=" ".join(OPS), WITH_CUDA="0", AOT_BUILD_DIR=str(out / "build"),
                                        MAX_JOBS=os.environ.get("MAX_JOBS", "1")))
        assert built.returncode == 0, built.stdout + built.stderr
        (path,) = (out / "dist").glob("*.whl")
        return path

    return once("aot_wheel", make)


def site(once) -> Path:
    """The wheel installed into a folder of its own, with the tested op's tests beside it
    (the tests put their parent folder first on sys.path, so `import ops` finds the wheel)."""
    built = wheel(once)

    def make(target: Path) -> Path:
        installed = run_interpreter("-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                    "--target", target, built, env=env())
        assert installed.returncode == 0, installed.stdout + installed.stderr
        (target / "tests").mkdir()
        for name in ("conftest.py", "pointwise_tester.py", f"test_{TESTED}.py"):
            shutil.copy(ROOT / "tests" / name, target / "tests" / name)
        shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")  # markers, options
        return target

    return once("aot_site", make)
