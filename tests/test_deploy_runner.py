"""Deployment without Python: a model on our ops (LLTM, GELU, sigmoid) exported with
torch.export + AOTInductor (and traced to TorchScript, the legacy path), run by the C++
runner (deploy/runner) with the ahead-of-time op libraries; its outputs must match the
eager Python model's.

CPU only here (ops built without CUDA); deploy/gpu_check.sh runs the same on CUDA inputs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import jit_loader
from jit_tools import prebuilt
import aot_wheel
from subproc import run_interpreter

ROOT = Path(jit_loader.REPO_ROOT)
OPS = aot_wheel.OPS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")]


@pytest.fixture(scope="module")
def op_libraries(once) -> list[Path]:
    """The three ops built ahead of time for CPU (the wheel test_aot checks)."""
    site = aot_wheel.site(once)
    libraries = [prebuilt.library_path(site / "ops" / op) for op in OPS]
    assert all(libraries), libraries
    return libraries


@pytest.fixture(scope="module")
def runner(once) -> Path:
    def make(build: Path) -> Path:
        configure = ["cmake", "-S", str(ROOT / "deploy" / "runner"), "-B", str(build),
                     f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}", "-DCMAKE_BUILD_TYPE=Release"]
        if torch.version.cuda and Path("/usr/local/cuda").is_dir():
            configure.append("-DCUDA_TOOLKIT_ROOT_DIR=/usr/local/cuda")  # torch's CMake config asks
        for command in (configure, ["cmake", "--build", str(build), "-j", os.environ.get("MAX_JOBS", "1")]):
            result = subprocess.run(command, capture_output=True, text=True)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return build / "ops_runner"

    return once("deploy_runner", make)


@pytest.fixture(scope="module")
def exported(once) -> dict:
    from deploy import export_model
    return once("deploy_model", lambda folder: export_model.export(folder, device="cpu"))


def _run(runner: Path, libraries: list[Path], model: str, inputs: str, outputs: Path):
    command = [str(runner)]
    for library in libraries:
        command += ["--ops", str(library)]
    return subprocess.run([*command, model, inputs, str(outputs)], capture_output=True, text=True,
                          timeout=120)


def _assert_matches(expected_path: str, actual_path: Path):
    expected, actual = torch.load(expected_path), torch.load(actual_path)
    assert len(actual) == len(expected) == 2
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_aoti_package_runs_in_cpp_and_matches_python(runner, op_libraries, exported, tmp_path):
    result = _run(runner, op_libraries, exported["pt2"], exported["inputs"], tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    assert "output 0: cpu Float shape [4, 64]" in result.stdout, result.stdout
    assert "output 1: cpu Float shape [4, 64]" in result.stdout, result.stdout
    _assert_matches(exported["expected"], tmp_path / "out.pt")


AOTI_IN_PYTHON = """
import sys, torch
import jit_loader
for op in sys.argv[4:]:
    jit_loader.load(op)  # the package calls our ops through the dispatcher
inputs = torch.load(sys.argv[2])
outputs = torch._inductor.aoti_load_package(sys.argv[1])(*inputs)
torch.save(tuple(outputs), sys.argv[3])
"""


def test_aoti_package_matches_python_in_python(exported, tmp_path):
    """The same package loaded back in Python: the reference the C++ run is held to. In a
    process of its own, so that a crash of the package loader fails this test only."""
    out = tmp_path / "python_out.pt"
    # -X faulthandler: a crash prints the Python stack where it happened.
    result = run_interpreter("-X", "faulthandler", "-c", AOTI_IN_PYTHON, exported["pt2"], exported["inputs"],
                             out, *OPS, timeout=600)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    _assert_matches(exported["expected"], out)


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("readelf") is None,
                    reason="needs Linux and readelf")
def test_aoti_model_library_links_the_shared_cpp_runtime(exported, tmp_path):
    """A static libstdc++ inside the model library (a toolchain without the libstdc++.so
    development link falls back to libstdc++.a) crashes the package loader in Python; the
    export links the shared runtime by its soname."""
    with zipfile.ZipFile(exported["pt2"]) as archive:
        names = [n for n in archive.namelist() if n.endswith(".so")]
        assert names, archive.namelist()
        archive.extractall(tmp_path, members=names)
    for name in names:
        dynamic = subprocess.run(["readelf", "-d", str(tmp_path / name)], capture_output=True,
                                 text=True, check=True).stdout
        assert "[libstdc++.so.6]" in dynamic, f"{name} does not link libstdc++.so.6:\n{dynamic}"


def test_torchscript_runs_in_cpp_and_matches_python(runner, op_libraries, exported, tmp_path):
    if "ts" not in exported:
        pytest.skip("this torch has no TorchScript tracing")
    result = _run(runner, op_libraries, exported["ts"], exported["inputs"], tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    _assert_matches(exported["expected"], tmp_path / "out.pt")


def test_runner_without_op_libraries_names_the_missing_op(runner, exported, tmp_path):
    result = _run(runner, [], exported["pt2"], exported["inputs"], tmp_path / "out.pt")
    assert result.returncode != 0
    assert any(f"{ns}::" in result.stderr for ns in OPS), result.stderr


def test_runner_reports_an_unloadable_library(runner, exported, tmp_path):
    bogus = tmp_path / "not_a_library.so"
    bogus.write_text("not ELF")
    result = _run(runner, [bogus], exported["pt2"], exported["inputs"], tmp_path / "out.pt")
    assert result.returncode == 1
    assert f"cannot load op library {bogus}" in result.stderr
