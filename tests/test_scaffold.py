"""``python -m jit_loader new``: the op folder it writes builds, and the tests it writes
pass unchanged, for a stable-ABI CPU op and CUDA op (the default), an ATen op
(``--aten``) and an ATen op from a schema; it never overwrites and rejects bad names.

The generated ops are built and tested as a user would: ``python -m jit_loader new`` and
``build`` in subprocesses, then pytest on the generated test file in a subprocess from
outside the repository (so neither the repository's conftest nor its pytest settings
help). Each op is built once per run; the CUDA op's CUDA tests skip without a GPU and
must run where one is visible (the ``cuda``-marked test checks that they did).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import jit_loader
from jit_tools.tools import cli, scaffold
from subproc import run_interpreter

ROOT = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()


def _env() -> dict:
    """This process's environment (JIT_LOADER_CACHE, the arch list, MAX_JOBS included),
    with the repository importable from any folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "JIT_LOADER_VERBOSE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _run(args, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return run_interpreter(*args, env=_env(), cwd=cwd, timeout=timeout)


def _count(word: str, summary: str) -> int:
    m = re.search(rf"(\d+) {word}", summary)
    return int(m.group(1)) if m else 0


def _includes(path: Path) -> list[str]:
    return re.findall(r'#include [<"]([^>"]+)[>"]', path.read_text())


def _aten_headers(path: Path) -> list[str]:
    return [h for h in _includes(path)
            if h.startswith(("ATen", "torch/library.h", "torch/extension.h", "c10"))]


def _scaffold_build_and_test(base: Path, name: str, cuda: bool, dir_arg: Path,
                             test_file: Path, *new_args: str) -> SimpleNamespace:
    """new, build, then pytest on the generated test file, each in a subprocess."""
    new = _run(["-m", "jit_loader", "new", name, "--dir", dir_arg, *(["--cuda"] if cuda else []),
                *new_args], cwd=base, timeout=120)
    assert new.returncode == 0, new.stdout + new.stderr
    op_dir = dir_arg / name
    build = _run(["-m", "jit_loader", "build", op_dir], cwd=base, timeout=1200)
    assert build.returncode == 0, build.stdout + build.stderr
    assert f"  {os.path.join('.', test_file.relative_to(base))}\n" in new.stdout, new.stdout
    tests = _run(["-m", "pytest", "-p", "no:cacheprovider", "--strict-markers", "-q", "-rs",
                  test_file],
                 cwd=base, timeout=900)
    output = tests.stdout + tests.stderr
    # pytest's last line of stdout; stderr may carry plugins' warnings after it.
    summary = next((line for line in reversed(tests.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    return SimpleNamespace(op_dir=op_dir, new=new, build=build, tests=tests, output=output,
                           passed=_count("passed", summary), skipped=_count("skipped", summary),
                           failed=_count("failed", summary) + _count("error", summary))


@pytest.fixture(scope="module")
def cpu_op(tmp_path_factory):
    """A stable-ABI CPU op (the default) scaffolded into a project laid out like this
    repository (ops/ and tests/ side by side): its test file goes to tests/."""
    base = tmp_path_factory.mktemp("cpu_project")
    (base / "tests").mkdir()
    return _scaffold_build_and_test(base, "scaffold_cpu_op", False, base / "ops",
                                    base / "tests" / "test_scaffold_cpu_op.py")


@pytest.fixture(scope="module")
def cuda_op(tmp_path_factory):
    """A stable-ABI CUDA op scaffolded into a folder of no project: its test file and a
    conftest registering the cuda marker go into the op folder."""
    base = tmp_path_factory.mktemp("cuda_anywhere")
    op_dir = base / "my" / "ops_here" / "scaffold_cuda_op"
    return _scaffold_build_and_test(base, "scaffold_cuda_op", True, op_dir.parent,
                                    op_dir / "test_scaffold_cuda_op.py")


def test_cpu_op_builds_and_its_tests_pass(cpu_op):
    names = sorted(p.name for p in cpu_op.op_dir.iterdir())
    assert names == ["__init__.py", "reference.py", "scaffold_cpu_op.cpp", "scaffold_cpu_op.h",
                     "scaffold_cpu_op.py", "scaffold_cpu_op_cpu.cpp", "scaffold_cpu_op_cpu.h",
                     "scaffold_cpu_op_host.h"]
    assert (cpu_op.op_dir.parent.parent / "tests" / "test_scaffold_cpu_op.py").is_file()
    math = (cpu_op.op_dir / "scaffold_cpu_op.h").read_text()
    assert re.findall(r'#include [<"]([^>"]+)[>"]', math) == ["common/host_device.h"]  # torch-free
    for host in ("scaffold_cpu_op.cpp", "scaffold_cpu_op_cpu.cpp", "scaffold_cpu_op_host.h"):
        assert not _aten_headers(cpu_op.op_dir / host), host  # stable ABI: no ATen header
    # The math reaches the CPU loops and the kernels only, never the host glue.
    assert "scaffold_cpu_op.h" in _includes(cpu_op.op_dir / "scaffold_cpu_op_cpu.cpp")
    for glue in ("scaffold_cpu_op.cpp", "scaffold_cpu_op_host.h", "scaffold_cpu_op_cpu.h"):
        assert "scaffold_cpu_op.h" not in _includes(cpu_op.op_dir / glue), glue
    cpp = (cpu_op.op_dir / "scaffold_cpu_op.cpp").read_text()
    assert "STABLE_TORCH_LIBRARY(scaffold_cpu_op, m) {" in cpp
    assert 'm.impl("forward", TORCH_BOX(&forward_cpu));' in cpp
    assert "OPS_DISPATCH_FLOATING(xc.scalar_type()" in cpp  # the headeronly dispatch
    host = (cpu_op.op_dir / "scaffold_cpu_op_host.h").read_text()
    assert 'OP_CHECK_FLOATING("scaffold_cpu_op.forward", "x", x);' in host
    assert ('STD_TORCH_CHECK(grad.sizes().equals(x.sizes()), '
            '"scaffold_cpu_op.backward: grad has shape "') in host
    assert "ok      scaffold_cpu_op  built in" in cpu_op.build.stdout
    assert cpu_op.tests.returncode == 0, cpu_op.output
    assert cpu_op.failed == 0 and cpu_op.passed >= 60, cpu_op.output
    assert cpu_op.skipped == 0, cpu_op.output  # a CPU-only op has no CUDA cases to skip


def test_cuda_op_builds_and_its_tests_pass(cuda_op):
    names = sorted(p.name for p in cuda_op.op_dir.iterdir() if p.name != "__pycache__")
    assert names == ["__init__.py", "conftest.py", "reference.py", "scaffold_cuda_op.cpp",
                     "scaffold_cuda_op.h", "scaffold_cuda_op.py", "scaffold_cuda_op_cpu.cpp",
                     "scaffold_cuda_op_cpu.h", "scaffold_cuda_op_cuda.cpp",
                     "scaffold_cuda_op_cuda.cu", "scaffold_cuda_op_cuda.h", "scaffold_cuda_op_host.h",
                     "test_scaffold_cuda_op.py"]
    cu = (cuda_op.op_dir / "scaffold_cuda_op_cuda.cu").read_text()
    includes = re.findall(r'#include [<"]([^>"]+)[>"]', cu)
    assert not [h for h in includes if h.startswith(("ATen", "torch", "c10"))], includes
    assert "return ops_common::launch(forward_kernel<T>," in cu and "<<<" not in cu
    host = cuda_op.op_dir / "scaffold_cuda_op_cuda.cpp"
    assert not _aten_headers(host) and "common/stable_cuda_host.h" in _includes(host)
    host_text = host.read_text()
    assert "STABLE_TORCH_LIBRARY_IMPL(scaffold_cuda_op, CUDA, m) {" in host_text
    assert "const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());" in host_text
    assert "ops_common::current_stream(xc)" in host_text
    if jit_loader.why_no_cuda() is None:
        assert "CUDA arch" in cuda_op.build.stdout, cuda_op.build.stdout  # the CUDA part compiled
    assert cuda_op.tests.returncode == 0, cuda_op.output
    assert cuda_op.failed == 0 and cuda_op.passed >= 60, cuda_op.output
    if not HAS_CUDA:
        assert cuda_op.skipped > 0, cuda_op.output
        assert "no CUDA GPU visible" in cuda_op.output


@pytest.fixture(scope="module")
def aten_op(tmp_path_factory):
    """The same op with its host side on ATen (--aten)."""
    base = tmp_path_factory.mktemp("aten_project")
    (base / "tests").mkdir()
    return _scaffold_build_and_test(base, "scaffold_aten_op", False, base / "ops",
                                    base / "tests" / "test_scaffold_aten_op.py", "--aten")


def test_aten_op_builds_and_its_tests_pass(aten_op):
    names = sorted(p.name for p in aten_op.op_dir.iterdir())
    assert names == ["__init__.py", "reference.py", "scaffold_aten_op.cpp", "scaffold_aten_op.h",
                     "scaffold_aten_op.py", "scaffold_aten_op_cpu.cpp", "scaffold_aten_op_cpu.h",
                     "scaffold_aten_op_host.h"]
    assert "ATen/Parallel.h" in _includes(aten_op.op_dir / "scaffold_aten_op_cpu.cpp")
    assert "scaffold_aten_op.h" not in _includes(aten_op.op_dir / "scaffold_aten_op.cpp")
    cpp = aten_op.op_dir / "scaffold_aten_op.cpp"
    assert {"ATen/ATen.h", "torch/library.h"} <= set(_includes(cpp))
    assert "TORCH_LIBRARY(scaffold_aten_op, m) {" in cpp.read_text()
    assert "STABLE_TORCH_LIBRARY" not in cpp.read_text()
    assert "ok      scaffold_aten_op  built in" in aten_op.build.stdout
    assert aten_op.tests.returncode == 0, aten_op.output
    assert aten_op.failed == 0 and aten_op.passed >= 60 and aten_op.skipped == 0, aten_op.output


def test_schema_needs_aten(tmp_path, capsys):
    """The schema templates write an ATen op: without --aten, one line says to add it."""
    assert _new("my_op", "--dir", str(tmp_path), "--schema", "my_op(Tensor x) -> Tensor") == 2
    err = capsys.readouterr().err
    assert err == ('new: --schema writes an ATen op; add --aten '
                   '(python -m jit_loader new my_op --aten --schema "...")\n'), err
    assert list(tmp_path.iterdir()) == []


RMSNORM_SCHEMA = "scaffold_rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor"


@pytest.fixture(scope="module")
def schema_op(tmp_path_factory):
    """An op scaffolded from an RMSNorm-shaped schema, with its CUDA part (compiled
    wherever nvcc is, run where a GPU is)."""
    base = tmp_path_factory.mktemp("schema_project")
    return _scaffold_build_and_test(base, "scaffold_rmsnorm", True, base / "kernels",
                                    base / "kernels" / "scaffold_rmsnorm" / "test_scaffold_rmsnorm.py",
                                    "--aten", "--schema", RMSNORM_SCHEMA)


def test_schema_op_follows_its_schema_builds_and_its_tests_pass(schema_op):
    op_dir = schema_op.op_dir
    cpp = (op_dir / "scaffold_rmsnorm.cpp").read_text()
    assert 'm.def("forward(Tensor x, Tensor weight, float eps=1e-06) -> Tensor");' in cpp
    assert 'm.def("backward(Tensor grad, Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");' in cpp
    host = (op_dir / "scaffold_rmsnorm_host.h").read_text()
    for check in ('OP_CHECK_FLOATING(op, "x", x);', 'OP_CHECK_SAME_DEVICE(op, "weight", weight, "x", x);',
                  'OP_CHECK_SAME_DTYPE(op, "weight", weight, "x", x);'):
        assert check in host
    surface = (op_dir / "scaffold_rmsnorm.py").read_text()
    assert "def scaffold_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-06)" in surface
    # The backward op's arguments, and one gradient per tensor (none for eps).
    assert ('jit_loader.register_autograd_op("scaffold_rmsnorm::forward", "scaffold_rmsnorm::backward", '
            '["grad", "x", "weight", "eps"],\n                                gives=["x", "weight"], lib=LIB)'
            in surface)
    assert "jit_loader.check_same_device(op, x=x, weight=weight)" in surface
    cu = (op_dir / "scaffold_rmsnorm_cuda.cu").read_text()
    assert not [h for h in re.findall(r'#include [<"]([^>"]+)[>"]', cu)
                if h.startswith(("ATen", "torch", "c10"))]
    if jit_loader.why_no_cuda() is None:
        assert "CUDA arch" in schema_op.build.stdout, schema_op.build.stdout  # the .cu compiled
    assert schema_op.tests.returncode == 0, schema_op.output
    assert schema_op.failed == 0 and schema_op.passed >= 40, schema_op.output
    for test in ("test_every_gradient_matches_reference", "test_rejects_mismatched_tensor",
                 "test_fake_kernels_reject_meta_mixed_with_cpu", "test_opcheck", "test_gradcheck"):
        assert test in (op_dir / "test_scaffold_rmsnorm.py").read_text()


@pytest.mark.parametrize("schema, message", [
    ("my_op(Tensor x) -> (Tensor, Tensor)", "one Tensor result; for several results copy the bundled LLTM"),
    ("my_op(Tensor x, Tensor? bias) -> Tensor", "argument 'bias' has type 'Tensor?'"),
    ("other(Tensor x) -> Tensor", "schema names the op 'other' but the op is 'my_op'"),
    ("my_op(float eps, Tensor x) -> Tensor", "the first argument must be a Tensor"),
    ("my_op(Tensor x, float grad) -> Tensor", "argument 'grad': the name is taken"),
    ("my_op(Tensor x, int k=0.5) -> Tensor", "argument 'k': default '0.5' is not an int literal"),
    ("my_op(Tensor x, Tensor x) -> Tensor", "argument 'x' appears twice"),
    ("my_op Tensor x", "is not of the form"),
])
def test_rejects_schemas_it_cannot_scaffold(tmp_path, capsys, schema, message):
    assert _new("my_op", "--dir", str(tmp_path), "--aten", "--schema", schema) == 2
    err = capsys.readouterr().err
    assert err.startswith("new: --schema: ") and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_schema_parsing_is_its_own_function():
    """Other template sets (another host ABI) start from the same parsed schema."""
    from jit_tools.tools.op_schema import parse_schema

    schema = parse_schema("rms(Tensor x, Tensor weight, float eps=1e-06, bool affine=true) -> Tensor")
    assert [(a.name, a.type, a.default) for a in schema.arguments] == [
        ("x", "Tensor", None), ("weight", "Tensor", None), ("eps", "float", "1e-06"),
        ("affine", "bool", "true")]
    assert [a.name for a in schema.tensors] == ["x", "weight"]
    assert schema.arguments[3].py_default == "True"
    assert schema.declaration(with_defaults=False) == "Tensor x, Tensor weight, float eps, bool affine"


def test_every_template_file_is_written(tmp_path, monkeypatch):
    """The files of templates/ are what the stable and ATen ops above build from: each one
    is read by some plan, and nothing else is there."""
    read = set()
    real = scaffold.template
    monkeypatch.setattr(scaffold, "template", lambda path: read.add(path) or real(path))
    for cuda in (False, True):
        for aten in (False, True):
            scaffold.plan("my_op", tmp_path, cuda=cuda, aten=aten)
    files = {p.relative_to(scaffold.TEMPLATES).as_posix().removesuffix(".tmpl")
             for p in scaffold.TEMPLATES.rglob("*") if p.is_file()}
    assert read == files

@pytest.mark.cuda
def test_cuda_op_runs_its_cuda_tests_on_the_gpu(cuda_op):
    assert "CUDA arch" in cuda_op.build.stdout, cuda_op.build.stdout  # the CUDA sources were built
    assert cuda_op.tests.returncode == 0, cuda_op.output
    assert cuda_op.skipped == 0 and cuda_op.failed == 0, cuda_op.output
    assert cuda_op.passed >= 120, cuda_op.output  # every case ran on both devices


def _new(*args: str) -> int:
    return cli.main(["new", *args])


def test_refuses_to_overwrite_an_existing_folder(tmp_path, capsys):
    existing = tmp_path / "my_op"
    existing.mkdir()
    (existing / "my_op.cpp").write_text("// mine\n")
    assert _new("my_op", "--dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"new: {existing} already exists; refusing to overwrite it" in err
    assert [p.name for p in existing.iterdir()] == ["my_op.cpp"]
    assert (existing / "my_op.cpp").read_text() == "// mine\n"


def test_refuses_to_overwrite_an_existing_test_file(tmp_path, capsys):
    (tmp_path / "tests").mkdir()
    test_file = tmp_path / "tests" / "test_my_op.py"
    test_file.write_text("# mine\n")
    assert _new("my_op", "--cuda", "--dir", str(tmp_path / "ops")) == 2
    assert f"new: {test_file} already exists; refusing to overwrite it" in capsys.readouterr().err
    assert not (tmp_path / "ops" / "my_op").exists()
    assert test_file.read_text() == "# mine\n"


def test_refusal_exits_non_zero_from_the_command_line(tmp_path):
    """What a shell script sees: `python -m jit_loader new` that refuses fails."""
    (tmp_path / "my_op").mkdir()
    root = Path(__file__).resolve().parents[1]
    for args in (["my_op", "--dir", str(tmp_path)], ["9lives", "--dir", str(tmp_path)]):
        out = run_interpreter("-m", "jit_loader", "new", *args, cwd=root, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(root)})
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.startswith("new: ") and not out.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["my_op"]


@pytest.mark.parametrize("name, why", [
    ("9lives", "must start with a letter"),
    ("my-op", "must start with a letter and hold only ASCII letters"),
    ("café", "only ASCII letters"),
    ("_private", "must start with a letter"),
    ("", "must start with a letter"),
    ("a__b", "double underscore"),
    ("lambda", "Python keyword"),
    ("namespace", "C++ keyword"),
    ("aten", "is taken"),
    ("common", "is taken"),
    ("test_op", "must not start with 'test'"),
])
def test_rejects_bad_names(tmp_path, capsys, name, why):
    assert _new(name, "--dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"new: invalid op name {name!r}: it " in err and why in err
    assert list(tmp_path.iterdir()) == []


def test_default_dir_is_ops_when_present(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert scaffold.default_dir() == tmp_path
    assert scaffold.plan("my_op").op_dir == tmp_path.resolve() / "my_op"
    (tmp_path / "ops").mkdir()
    assert scaffold.default_dir() == tmp_path / "ops"
    made = scaffold.plan("my_op")
    assert made.op_dir == tmp_path.resolve() / "ops" / "my_op"
    assert made.test_file == made.op_dir / "test_my_op.py"  # no tests/ folder beside ops/
    assert not (tmp_path / "ops" / "my_op").exists()  # plan writes nothing


def test_module_class_name():
    assert scaffold.class_name("my_op") == "MyOp"
    assert scaffold.class_name("square") == "Square"
    assert scaffold.class_name("X") == "XModule"  # never the function's own name
