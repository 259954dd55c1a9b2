"""Ops on the LibTorch stable ABI (``STABLE_TORCH_LIBRARY``, ``TORCH_BOX``) go through
the loader like ATen ops: build, cache hit in a new process, reload in a live process
with handles given out earlier following, ``file:line`` errors, ``load_inline``. A
stable build includes nothing of ATen and its key names the torch version it targets,
not the torch that built it. Every build runs in a fresh process against a private
cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch

import jit_loader
from jit_tools import key as keys, abi, prebuilt
from jit_tools.builder import toolchain
from subproc import json_result, private_env, run_python
from toy_ops import EDIT_SCRIPT, copy_op, ninja_log

LOAD_AND_SCALE = """
    import json, torch, jit_loader
    op = jit_loader.load({path!r})
    y = torch.ops.stable_op.scale(torch.ones(3))
    print(json.dumps({{"compiled": op.build.compiled, "key": op.build.key, "y": y.tolist(),
                      "library": op.library}}))
"""


def test_stable_op_builds_then_a_new_process_loads_it_without_compiler(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    cache = tmp_path / "cache"
    env = private_env(cache)
    first = json_result(run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env))
    assert first["compiled"] is True and first["y"] == [2.0, 2.0, 2.0]

    log_before = ninja_log(cache, "stable_op")
    second = run_python(LOAD_AND_SCALE.format(path=str(op_dir)), env=env)
    assert json_result(second) == {**first, "compiled": False}
    assert ninja_log(cache, "stable_op") == log_before  # Ninja never ran
    assert second.stderr.strip() == ""

    # Built as a stable unit: the stable registry header and header set, the
    # target version, nothing of the ATen pieces.
    (ninja,) = (cache / "stable_op").glob("work-*/build.ninja")
    text = ninja.read_text()
    assert abi.TARGET_FLAG in text and str(abi.STABLE_REGISTRY_HEADER) in text
    assert "jit_loader_registry.h" not in text and "jit_loader_lean.h" not in text
    manifest = json.loads((cache / "stable_op" / "builds" / first["key"] / "manifest.json").read_text())
    assert manifest["config"]["abi"] == "stable" and manifest["config"]["torch"] == "stable>=2.11"


def test_stable_support_files_include_nothing_of_aten(tmp_path):
    """The force-included header of a stable unit (the loader's entry points included),
    with every header it reaches (system headers too), names no ATen or c10 header."""
    from torch.utils.cpp_extension import include_paths
    flags = [f"-I{p}" for p in include_paths()] + [abi.TARGET_FLAG, "-std=c++17"]
    proc = subprocess.run([toolchain.cxx_compiler(), *flags, "-M", "-x", "c++",
                           str(abi.STABLE_REGISTRY_HEADER)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    headers = proc.stdout.replace("\\\n", " ").split()
    assert any("torch/csrc/stable/library.h" in h for h in headers)
    assert not [h for h in headers if "/ATen/" in h or "/c10/" in h]


IN_PROCESS_EDITS = EDIT_SCRIPT + """
    header, source = op_dir / "stable_op.h", op_dir / "stable_op.cpp"
    ones = torch.ones(2)
    op = jit_loader.load(op_dir)
    held = torch.ops.stable_op.scale.default      # a handle given out before any edit
    method = op.scale
    out["initial"] = held(ones).tolist()

    original_header = header.read_text()
    header.write_text(original_header.replace("kFactor = 2.0f", "kFactor = 5.0f"))
    out["edit"] = [op.reload(), op.build.compiled, held(ones).tolist(), method(ones).tolist()]

    header.write_text(original_header)
    out["revert"] = [op.reload(), op.build.compiled, held(ones).tolist()]

    original_source = source.read_text()
    bad_line = next(i for i, l in enumerate(original_source.splitlines(), 1) if "* kFactor" in l)
    source.write_text(original_source.replace("* kFactor", "* kFactr"))
    try:
        op.reload()
        out["error"] = None
    except jit_loader.BuildError as e:
        out["error"], out["error_line"], out["expected_line"] = str(e).splitlines()[0], e.line, bad_line
    out["after_error"] = held(ones).tolist()

    source.write_text(original_source.replace("* kFactor", "* kFactor + 1.0f"))
    out["fixed"] = [op.reload(), held(ones).tolist()]
    out["ops"] = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("stable_op::"))
    print(json.dumps(out))
"""


def test_stable_op_reloads_in_a_live_process(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    out = json_result(run_python(IN_PROCESS_EDITS.format(path=str(op_dir)), cache=tmp_path / "cache"))
    assert out["initial"] == [2.0, 2.0]
    # the old registrations are withdrawn and replaced: no duplicate-registration error,
    # and the handle given out before the edit runs the new build
    assert out["edit"] == [True, True, [5.0, 5.0], [5.0, 5.0]]
    assert out["revert"] == [True, False, [2.0, 2.0]]  # the earlier build, from the cache
    assert out["error"].startswith(f"{op_dir / 'stable_op.cpp'}:{out['expected_line']}: ")
    assert "kFactr" in out["error"] and out["error_line"] == out["expected_line"]
    assert out["after_error"] == [2.0, 2.0]  # the previous build stays in use
    assert out["fixed"] == [True, [3.0, 3.0]]
    assert out["ops"] == ["stable_op::scale"]


def test_a_folder_mixing_both_abis_is_refused_in_one_line(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    shutil.copy(copy_op("toy_op", tmp_path / "aten") / "toy_op.cpp", op_dir / "toy_op.cpp")
    shutil.copy(tmp_path / "aten" / "toy_op" / "toy_op.h", op_dir / "toy_op.h")
    with pytest.raises(jit_loader.JitLoaderError) as err:
        jit_loader.load(op_dir)
    message = str(err.value)
    assert "\n" not in message and "mixes ABIs" in message
    assert f"{op_dir / 'stable_op.cpp'}:2 (torch/csrc/stable/library.h)" in message
    assert f"{op_dir / 'toy_op.cpp'}:1 (ATen/ATen.h)" in message


def test_a_unit_using_both_abis_is_refused(tmp_path):
    op_dir = copy_op("stable_op", tmp_path)
    source = op_dir / "stable_op.cpp"
    source.write_text("#include <ATen/ATen.h>\n" + source.read_text())
    with pytest.raises(jit_loader.JitLoaderError,
                       match=r"stable_op\.cpp uses both the stable ABI, .*:3 .*and ATen, .*:1 \(ATen/ATen\.h\)"):
        jit_loader.load(op_dir)


INLINE = """
    import json, torch, jit_loader
    source = open({source!r}).read().replace(
        '#include "stable_op.h"', "constexpr float kFactor = 4.0f;").replace("stable_op", "stable_inline")
    library = jit_loader.load_inline("stable_inline", cpp_sources=[source], is_python_module=False)
    main = open(library.rsplit("/builds/", 1)[0].replace("/stable_inline", "/_inline/stable_inline") + "/main.cpp").read()
    try:
        jit_loader.load_inline("stable_bound", cpp_sources=[source], functions=["scale_cpu"])
        refused = None
    except jit_loader.JitLoaderError as e:
        refused = str(e)
    print(json.dumps({{"y": torch.ops.stable_inline.scale(torch.ones(2)).tolist(),
                      "extension_h": "torch/extension.h" in main, "refused": refused}}))
"""


def test_load_inline_takes_stable_sources(tmp_path):
    source = copy_op("stable_op", tmp_path) / "stable_op.cpp"
    out = json_result(run_python(INLINE.format(source=str(source)), cache=tmp_path / "cache"))
    assert out["y"] == [4.0, 4.0]
    assert out["extension_h"] is False  # no ATen header is prepended to stable text
    assert "functions=" in out["refused"] and "STABLE_TORCH_LIBRARY" in out["refused"]


def test_stable_key_names_the_target_version_not_the_torch_build(tmp_path, monkeypatch):
    stable_dir = copy_op("stable_op", tmp_path)
    aten_dir = copy_op("toy_op", tmp_path)
    stable_key, stable_config = jit_loader.op_key(stable_dir)
    aten_key, aten_config = jit_loader.op_key(aten_dir)
    assert stable_config["torch"] == "stable>=2.11" and aten_config["torch"] == torch.__version__
    assert "-DTORCH_TARGET_VERSION=0x020b000000000000" in stable_config["cflags"]

    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(torch.version, "git_version", "0" * 40)
    assert jit_loader.op_key(stable_dir)[0] == stable_key  # another torch: same build
    assert jit_loader.op_key(aten_dir)[0] != aten_key      # an ATen build stays exact


def test_stable_key_is_the_same_on_another_machine(tmp_path, monkeypatch):
    """What differs between two machines (where the op folder and the compilers lie, their
    mtimes, the C++ compiler's release) leaves a stable key as it is, so that a prebuilt
    cache layer serves both; nvcc's release is part of it. An ATen key stays exact."""
    here, there = tmp_path / "here", tmp_path / "there"
    stable_key = jit_loader.op_key(copy_op("stable_op", here))[0]
    aten_key = jit_loader.op_key(copy_op("toy_op", here))[0]
    identity = toolchain.file_identity
    monkeypatch.setattr(toolchain, "file_identity",
                        lambda path: identity(path) and identity(path) + ":another-install")
    release = toolchain.tool_version
    monkeypatch.setattr(toolchain, "tool_version",
                        lambda path: "(GCC) 99.1.0" if "nvcc" not in str(path) else release(path))
    assert jit_loader.op_key(copy_op("stable_op", there))[0] == stable_key
    assert jit_loader.op_key(copy_op("toy_op", there))[0] != aten_key
    cfg = {"abi": abi.STABLE, "with_cuda": True, "include_dirs": [], "cflags": [], "cuda_cflags": [],
           "no_cuda_reason": None, "cxx": "any"}
    monkeypatch.setattr(toolchain, "cuda_home", lambda: str(tmp_path / "cuda"))
    monkeypatch.setattr(toolchain, "tool_version", lambda path: f"release of {path}")
    view = keys.key_view(cfg, tmp_path)
    assert "cxx" not in view and view["nvcc"] == f"release of {tmp_path / 'cuda' / 'bin' / 'nvcc'}"


@pytest.mark.parametrize("torch_version, torch_cuda, runs", [
    ("2.11.0+cu130", "13.0", True), ("2.14.1+cu130", "13.2", True), ("2.10.0+cu130", "13.0", False),
    ("2.11.0+cu128", "12.8", False), ("2.11.0+cpu", None, False)])
def test_prebuilt_stable_library_runs_from_its_target_on(monkeypatch, torch_version, torch_cuda, runs):
    """A prebuilt stable library (the AOT wheel's) is taken by every torch from its target
    version on with the CUDA major version it was built with; an ATen one only by its own."""
    stable = {"abi": "stable", "torch": abi.TARGET_NAME, "target": [2, 11], "torch_cuda": "13.0"}
    aten = {"abi": "aten", "torch": "2.14.1+cu130"}
    monkeypatch.setattr(torch, "__version__", torch_version)
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    assert prebuilt.runs_with_this_torch(stable) is runs
    assert prebuilt.runs_with_this_torch(dict(stable, torch_cuda=None)) is (torch_version >= "2.11")
    assert prebuilt.runs_with_this_torch(aten) is (torch_version == "2.14.1+cu130")


@pytest.mark.parametrize("name, abi_name", [("sigmoid", "stable"), ("gelu", "stable"), ("resize", "stable"),
                                            ("detection", "stable"),
                                            ("lltm", "aten"), ("scatter", "aten")])
def test_bundled_ops_build_against_their_abi(name, abi_name):
    """Ops whose autograd lives in Python are stable; the two with C++ autograd, ATen."""
    config = jit_loader.op_key(name)[1]
    assert config.get("abi", "aten") == abi_name
    assert ("-DTORCH_TARGET_VERSION=0x020b000000000000" in config["cflags"]) == (abi_name == "stable")


CHECKED = """
    import json, os, torch, jit_loader
    source = '''
    #include <torch/csrc/stable/library.h>
    #include <torch/csrc/stable/ops.h>
    #include <torch/csrc/stable/tensor.h>
    #include "common/stable_checks.h"
    using torch::stable::Tensor;
    Tensor twice(const Tensor& x, int64_t k) {
      OP_CHECK_FLOATING("stable_checked.twice", "x", x);
      OPS_CHECK(k > 0, "stable_checked.twice: k must be positive, got ", k);
      return torch::stable::clone(x);
    }
    STABLE_TORCH_LIBRARY(stable_checked, m) { m.def("twice(Tensor x, int k) -> Tensor"); }
    STABLE_TORCH_LIBRARY_IMPL(stable_checked, CPU, m) { m.impl("twice", TORCH_BOX(&twice)); }
    '''
    jit_loader.load_inline("stable_checked", cpp_sources=[source], is_python_module=False)
    out = {}
    for context in ("0", "1"):
        os.environ["TORCH_SHOW_CPP_STACKTRACES"] = context
        for case, args in (("dtype", (torch.ones(2, dtype=torch.long), 1)), ("k", (torch.ones(2), -3))):
            try:
                torch.ops.stable_checked.twice(*args)
            except RuntimeError as e:
                out[case + context] = str(e)
    print(json.dumps(out))
"""


def test_stable_checks_read_as_aten_checks(tmp_path):
    """OPS_CHECK and the OP_CHECK_* of common/stable_checks.h raise the message alone, as
    TORCH_CHECK reads from Python (STD_TORCH_CHECK puts the C++ function and the header's
    absolute path first); TORCH_SHOW_CPP_STACKTRACES=1 adds the location after it."""
    out = json_result(run_python(CHECKED, cache=tmp_path / "cache"))
    assert out["dtype0"] == "stable_checked.twice: x must be a floating-point tensor, got Long"
    assert out["k0"] == "stable_checked.twice: k must be positive, got -3"
    for case in ("dtype", "k"):
        message, context = out[case + "1"].split("\n")
        assert message == out[case + "0"]
        assert context.startswith("Exception raised from twice at ") and "stable_checked" in context
