"""``python -m jit_loader new``: the op folder it writes builds, and the tests it writes
pass unchanged, for both kinds (elementwise, any schema; rowwise) on both ABIs (stable, the
default, and ``--aten``); a bad argument reads the same on both; the rowwise op becomes
RMSNorm exactly with two edits; on a GPU every scaffolded op swaps a kernel edit; it never
overwrites and rejects bad names, kinds and schemas.

The generated ops are built and tested as a user would: ``python -m jit_loader new`` and
``build`` in subprocesses, then pytest on the generated test file in a subprocess from
outside the repository (so neither the repository's conftest nor its pytest settings
help). Each op is built once per run, whatever the number of test processes (five, four
of them with CUDA sources, which compile wherever nvcc is); their CUDA tests skip without
a GPU and must run where one is visible (the ``cuda``-marked tests check that they did).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import jit_loader
from jit_tools.tools import cli, scaffold
from subproc import child_env, json_result, run_cli, run_interpreter, run_python

HAS_CUDA = torch.cuda.is_available()


def _env() -> dict:
    """This process's environment (JIT_LOADER_CACHE, the arch list, MAX_JOBS included),
    with the repository importable from any folder, and no pytest options of this run
    for the generated tests' own."""
    return child_env(PYTEST_ADDOPTS=None)


def _count(word: str, summary: str) -> int:
    m = re.search(rf"(\d+) {word}", summary)
    return int(m.group(1)) if m else 0


def _includes(path: Path) -> list[str]:
    return re.findall(r'#include [<"]([^>"]+)[>"]', path.read_text())


def _aten_headers(path: Path) -> list[str]:
    return [h for h in _includes(path)
            if h.startswith(("ATen", "torch/library.h", "torch/extension.h", "c10"))]


def _scaffold_build_and_test(base: Path, name: str, cuda: bool, dir_arg: Path,
                             test_file: Path, *new_args: str, build_it: bool = True) -> SimpleNamespace:
    """new, build, then pytest on the generated test file, each in a subprocess
    (``build_it`` False: new alone)."""
    new = run_cli("new", name, "--dir", dir_arg, *(["--cuda"] if cuda else []), *new_args,
                  env=_env(), cwd=base, timeout=120)
    assert new.returncode == 0, new.stdout + new.stderr
    op_dir = dir_arg / name
    if not build_it:
        return SimpleNamespace(op_dir=op_dir, new=new, test_file=test_file)
    build = run_cli("build", op_dir, env=_env(), cwd=base, timeout=1200)
    assert build.returncode == 0, build.stdout + build.stderr
    assert f"  {os.path.join('.', test_file.relative_to(base))}\n" in new.stdout, new.stdout
    tests = run_interpreter("-m", "pytest", "-p", "no:cacheprovider", "--strict-markers", "-q", "-rs",
                            test_file, env=_env(), cwd=base, timeout=900)
    output = tests.stdout + tests.stderr
    # pytest's last line of stdout; stderr may carry plugins' warnings after it.
    summary = next((line for line in reversed(tests.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    return SimpleNamespace(op_dir=op_dir, new=new, build=build, tests=tests, output=output,
                           passed=_count("passed", summary), skipped=_count("skipped", summary),
                           failed=_count("failed", summary) + _count("error", summary))


@pytest.fixture(scope="module")
def cpu_op(once):
    """The default op (elementwise, stable ABI, CPU only) scaffolded into a project laid out
    like this repository (ops/, tests/ and experiments/ side by side): its test file goes to
    tests/, its benchmark to experiments/."""
    def make(base: Path) -> SimpleNamespace:
        (base / "tests").mkdir()
        (base / "experiments").mkdir()
        return _scaffold_build_and_test(base, "scaffold_cpu_op", False, base / "ops",
                                        base / "tests" / "test_scaffold_cpu_op.py")

    return once("scaffold_cpu_op", make)


SCHEMA = "{name}(Tensor x, Tensor weight, float eps=1e-06, int k=2, bool flag=true) -> Tensor"


def _anywhere(once, name: str, *new_args: str) -> SimpleNamespace:
    """A CUDA op scaffolded into a folder of no project: its test file, benchmark and a
    conftest registering the cuda marker go into the op folder."""
    def make(base: Path) -> SimpleNamespace:
        op_dir = base / "my" / "ops_here" / name
        return _scaffold_build_and_test(base, name, True, op_dir.parent, op_dir / f"test_{name}.py",
                                        *new_args)

    return once(name, make)


@pytest.fixture(scope="module")
def schema_op(once):
    """An elementwise op from a schema of every argument kind, stable ABI, with CUDA."""
    name = "scaffold_schema_op"
    return _anywhere(once, name, "--schema", SCHEMA.format(name=name))


@pytest.fixture(scope="module")
def schema_aten_op(once):
    """The same schema with its host side on ATen."""
    name = "scaffold_schema_aten"
    return _anywhere(once, name, "--aten", "--schema", SCHEMA.format(name=name))


@pytest.fixture(scope="module")
def rowwise_op(once):
    return _anywhere(once, "scaffold_rowwise", "--kind", "rowwise")


@pytest.fixture(scope="module")
def rowwise_aten_op(once):
    return _anywhere(once, "scaffold_rowwise_aten", "--kind", "rowwise", "--aten")


def _passed(made: SimpleNamespace, at_least: int) -> None:
    assert made.tests.returncode == 0, made.output
    assert made.failed == 0 and made.passed >= at_least, made.output
    if jit_loader.why_no_cuda() is None and (made.op_dir / f"{made.op_dir.name}_cuda.cu").exists():
        assert "CUDA arch" in made.build.stdout, made.build.stdout  # the CUDA part compiled
    if not HAS_CUDA and (made.op_dir / f"{made.op_dir.name}_cuda.cu").exists():
        assert made.skipped > 0 and "no CUDA GPU visible" in made.output


def _anatomy(op_dir: Path, stable: bool) -> None:
    """The op anatomy: the math reaches the CPU loops and the kernels only; the .cu is
    torch-free and launches through ops_common::launch, host code under the NVRTC guard;
    a stable op includes no ATen header."""
    name = op_dir.name
    math = op_dir / f"{name}.h"
    assert all(not h.startswith(("ATen", "torch", "c10")) for h in _includes(math)), _includes(math)
    assert f"{name}.h" in _includes(op_dir / f"{name}_cpu.cpp")
    for glue in (f"{name}.cpp", f"{name}_host.h", f"{name}_cpu.h", f"{name}_checks.h"):
        assert f"{name}.h" not in _includes(op_dir / glue), glue
    cu = op_dir / f"{name}_cuda.cu"
    if cu.exists():
        text = cu.read_text()
        assert not [h for h in _includes(cu) if h.startswith(("ATen", "torch", "c10"))]
        assert "return ops_common::launch(forward_kernel<T>," in text and "<<<" not in text
        assert "#if !defined(__CUDACC_RTC__)" in text
    if stable:
        for host in op_dir.glob("*.cpp"):
            assert not _aten_headers(host), host


def test_cpu_op_builds_and_its_tests_pass(cpu_op):
    names = sorted(p.name for p in cpu_op.op_dir.iterdir())
    assert names == ["__init__.py", "reference.py", "scaffold_cpu_op.cpp", "scaffold_cpu_op.h",
                     "scaffold_cpu_op.py", "scaffold_cpu_op_checks.h", "scaffold_cpu_op_cpu.cpp",
                     "scaffold_cpu_op_cpu.h", "scaffold_cpu_op_host.h"]
    base = cpu_op.op_dir.parent.parent
    assert (base / "tests" / "test_scaffold_cpu_op.py").is_file()
    assert (base / "experiments" / "bench_scaffold_cpu_op.py").is_file()
    _anatomy(cpu_op.op_dir, stable=True)
    cpp = (cpu_op.op_dir / "scaffold_cpu_op.cpp").read_text()
    assert "STABLE_TORCH_LIBRARY(scaffold_cpu_op, m) {" in cpp
    assert 'm.def("forward(Tensor x) -> Tensor");' in cpp
    assert 'm.impl("forward", TORCH_BOX(&forward_cpu));' in cpp
    assert "OPS_DISPATCH_FLOATING(x_c.scalar_type()" in cpp  # the headeronly dispatch
    rules = (cpu_op.op_dir / "scaffold_cpu_op_checks.h").read_text()
    assert "#define SCAFFOLD_CPU_OP_FORWARD_RULES(RULE) \\\n  RULE(floating, x)\n" in rules
    assert "SCAFFOLD_CPU_OP_FORWARD_RULES(OPS_CHECK_RULE)" in (cpu_op.op_dir / "scaffold_cpu_op_host.h").read_text()
    assert 'RULES = jit_loader.op_rules(__file__)' in (cpu_op.op_dir / "scaffold_cpu_op.py").read_text()
    assert re.match(r"ok      scaffold_cpu_op  (built in|up to date)", cpu_op.build.stdout), cpu_op.build.stdout
    _passed(cpu_op, 40)
    assert cpu_op.skipped == 0, cpu_op.output  # a CPU-only op has no CUDA cases to skip


SUITE_CASES = """
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("bench_op", sys.argv[1])
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = bench.suite_cases("cpu", "tiny")
    fns = cases[0].build()
    print(json.dumps({"cases": [c.label for c in cases], "impls": sorted(fns),
                      "ran": all(fn() is not None for fn in fns.values())}))
"""


def test_the_generated_benchmark_times_the_op_and_joins_the_suite(cpu_op):
    """bench_<op>.py: the op against its reference (eager; compiled on a GPU) with
    jit_loader.bench, and the same cases for the repository's suite."""
    bench = cpu_op.op_dir.parent.parent / "experiments" / "bench_scaffold_cpu_op.py"
    run = run_interpreter(bench, "--device", "cpu", "--quick", env=_env(), cwd=bench.parent, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("## scaffold_cpu_op ") == 4  # two sizes, forward and forward+backward
    assert "| ours " in run.stdout and "| eager " in run.stdout
    out = json_result(run_python(SUITE_CASES, bench, env=_env()))
    assert out == {"cases": ["scaffold_cpu_op forward 64x32 float32"], "impls": ["eager", "ours"],
                   "ran": True}


def test_schema_op_follows_its_schema_on_both_abis(schema_op, schema_aten_op):
    """--schema writes the op on either ABI (the stable one by default), every file
    following the schema, and its tests pass as generated."""
    for made, stable in ((schema_op, True), (schema_aten_op, False)):
        name = made.op_dir.name
        _anatomy(made.op_dir, stable)
        cpp = (made.op_dir / f"{name}.cpp").read_text()
        assert ('m.def("forward(Tensor x, Tensor weight, float eps=1e-06, int k=2, bool flag=True) '
                '-> Tensor");') in cpp
        assert ('m.def("backward(Tensor grad, Tensor x, Tensor weight, float eps, int k, bool flag) '
                '-> (Tensor, Tensor)");') in cpp
        assert ("\nSTABLE_TORCH_LIBRARY(" in cpp) == stable and ("\nTORCH_LIBRARY(" in cpp) != stable
        rules = (made.op_dir / f"{name}_checks.h").read_text()
        for rule in ("RULE(floating, x)", "RULE(same_device, weight, x)", "RULE(same_dtype, weight, x)",
                     "RULE(same_shape, weight, x)"):
            assert rule in rules
        surface = (made.op_dir / f"{name}.py").read_text()
        assert (f"def {name}(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-06, k: int = 2, "
                "flag: bool = True)") in surface
        assert (f'jit_loader.register_autograd_op("{name}::forward", "{name}::backward", '
                '["grad", "x", "weight", "eps", "k", "flag"],\n'
                '                                gives=["x", "weight"], lib=LIB)') in surface
        _passed(made, 40)


def test_rowwise_op_builds_and_its_tests_pass_on_both_abis(rowwise_op, rowwise_aten_op):
    """--kind rowwise: an RMSNorm-shaped op (x, weight, eps), its kernels on the block
    reduction of ops/common/reduce.cuh, correct and gradchecked as generated."""
    for made, stable in ((rowwise_op, True), (rowwise_aten_op, False)):
        name = made.op_dir.name
        _anatomy(made.op_dir, stable)
        assert "common/reduce.cuh" in _includes(made.op_dir / f"{name}_cuda.cu")
        assert "block_sum(" in (made.op_dir / f"{name}_cuda.cu").read_text()
        cpp = (made.op_dir / f"{name}.cpp").read_text()
        assert 'm.def("forward(Tensor x, Tensor weight, float eps=1e-06) -> Tensor");' in cpp
        rules = (made.op_dir / f"{name}_checks.h").read_text()
        assert "RULE(size_as, weight, 0, x, -1)" in rules and "RULE(nonnegative, eps)" in rules
        _passed(made, 40)


ERRORS = """
    import json, sys, torch, jit_loader
    from pathlib import Path
    from jit_tools.tools import bad_inputs
    out = {}
    for folder in sys.argv[1:]:
        op = jit_loader.load(folder)
        name = op.name
        reference = op.module.__name__  # the surface; the reference beside it
        import importlib.util
        spec = importlib.util.spec_from_file_location("_r_" + name, Path(folder) / "reference.py")
        ref = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ref)
        args = ref.example_inputs("cpu", torch.float32, (6, 4))
        call = jit_loader.fast_op(getattr(torch.ops, name).forward.default)
        names = [a.name for a in call._schema.arguments]
        rules = jit_loader.op_rules(Path(folder) / (name + "_checks.h"))
        texts = []
        for case in (bad_inputs.from_rules(rules, "forward", name + ".forward", names, tuple(args))
                     + bad_inputs.not_tensors(call, name + ".forward", tuple(args))):
            try:
                call(*case.args)
                texts.append("no error")
            except Exception as e:
                texts.append(type(e).__name__ + ": " + str(e).replace(name, "OP"))
        out[name] = texts
    print(json.dumps(out))
"""


def test_bad_arguments_read_the_same_on_both_abis(schema_op, schema_aten_op, rowwise_op,
                                                   rowwise_aten_op):
    """The same op on the stable ABI and on ATen: every bad argument, one line each, the
    same words (the op's name aside)."""
    folders = [str(m.op_dir) for m in (schema_op, schema_aten_op, rowwise_op, rowwise_aten_op)]
    out = json_result(run_python(ERRORS, *folders, env=_env()))
    schema_stable, schema_aten, rowwise_stable, rowwise_aten = out.values()
    for stable, aten in ((schema_stable, schema_aten), (rowwise_stable, rowwise_aten)):
        assert stable == aten and len(stable) >= 8
        assert all("\n" not in t and t.split(": ", 1)[1].startswith("OP.forward: ") for t in stable), stable
    assert "RuntimeError: OP.forward: weight.size(0) must be x.size(-1) = 4, got 5 (shape [5])" in rowwise_stable
    assert "TypeError: OP.forward: x must be a Tensor, got None" in rowwise_stable
    assert "TypeError: OP.forward: eps must be a float, got str 'three'" in schema_stable


RMSNORM_MATH = ("  return T(1) / (sum / n + eps);", "  return ops_common::rsqrt(sum / n + eps);",
                "  return -s * s / n;", "  return -s * s * s / (T(2) * n);")
RMSNORM_REFERENCE = ("    s = 1 / (mean_square + eps)", "    s = torch.rsqrt(mean_square + eps)")

RMSNORM_CHECK = """
    import json, sys, torch, torch.nn.functional as F, jit_loader
    op = jit_loader.load(sys.argv[1])
    x = torch.randn(5, 7, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    y = op.scaffold_rmsnorm(x, w, 1e-5)
    want = F.rms_norm(x, (16,), w, 1e-5)
    g = torch.randn_like(y)
    got_grads = torch.autograd.grad(y, (x, w), g)
    want_grads = torch.autograd.grad(want, (x, w), g)
    print(json.dumps({"forward": torch.allclose(y, want, rtol=1e-10, atol=1e-12),
                      "grads": all(torch.allclose(a, b, rtol=1e-10, atol=1e-12)
                                   for a, b in zip(got_grads, want_grads))}))
"""


def test_rowwise_op_is_rmsnorm_after_two_edits(tmp_path):
    """RMSNorm exactly, from the rowwise scaffold: the statistic and its derivative in the
    math header, the statistic in reference.py; the generated tests still pass, and the op
    agrees with torch's F.rms_norm, forward and backward."""
    made = _scaffold_build_and_test(tmp_path, "scaffold_rmsnorm", False, tmp_path / "kernels",
                                    tmp_path / "kernels" / "scaffold_rmsnorm" / "test_scaffold_rmsnorm.py",
                                    "--kind", "rowwise", build_it=False)
    math, ref = made.op_dir / "scaffold_rmsnorm.h", made.op_dir / "reference.py"
    text = math.read_text()
    for old, new in zip(RMSNORM_MATH[::2], RMSNORM_MATH[1::2]):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    math.write_text(text)
    assert RMSNORM_REFERENCE[0] in ref.read_text()
    ref.write_text(ref.read_text().replace(*RMSNORM_REFERENCE))
    tests = run_interpreter("-m", "pytest", "-p", "no:cacheprovider", "-q", made.test_file, env=_env(),
                            cwd=tmp_path, timeout=900)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    out = json_result(run_python(RMSNORM_CHECK, made.op_dir, env=_env()))
    assert out == {"forward": True, "grads": True}


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
    assert _new("my_op", "--dir", str(tmp_path), "--schema", schema) == 2
    err = capsys.readouterr().err
    assert err.startswith("new: --schema: ") and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_schema_parsing_is_its_own_function():
    """Every kind and ABI start from the same parsed schema; the dispatcher's spelling of a
    bool default is True."""
    from jit_tools.tools.op_schema import parse_schema

    schema = parse_schema("rms(Tensor x, Tensor weight, float eps=1e-06, bool affine=true) -> Tensor")
    assert [(a.name, a.type, a.default) for a in schema.arguments] == [
        ("x", "Tensor", None), ("weight", "Tensor", None), ("eps", "float", "1e-06"),
        ("affine", "bool", "true")]
    assert [a.name for a in schema.tensors] == ["x", "weight"]
    assert schema.arguments[3].py_default == "True"
    assert schema.declaration(with_defaults=False) == "Tensor x, Tensor weight, float eps, bool affine"
    assert schema.declaration() == "Tensor x, Tensor weight, float eps=1e-06, bool affine=True"


def test_every_template_file_is_written(tmp_path, monkeypatch):
    """The files of templates/ are what the ops above build from: each one is read by some
    plan, and nothing else is there."""
    read = set()
    real = scaffold.template
    monkeypatch.setattr(scaffold, "template", lambda path: read.add(path) or real(path))
    for kind in ("elementwise", "rowwise"):
        for cuda in (False, True):
            for aten in (False, True):
                scaffold.plan("my_op", tmp_path, cuda=cuda, aten=aten, kind=kind)
    files = {p.relative_to(scaffold.TEMPLATES).as_posix().removesuffix(".tmpl")
             for p in scaffold.TEMPLATES.rglob("*") if p.is_file()}
    assert read == files


def test_kind_refusals(tmp_path, capsys):
    assert _new("my_op", "--dir", str(tmp_path), "--kind", "rowwise", "--schema",
                "my_op(Tensor x) -> Tensor") == 2
    assert "new: --kind rowwise takes its own schema" in capsys.readouterr().err
    with pytest.raises(scaffold.ScaffoldError, match="--kind 'columnwise': the scaffold makes elementwise, rowwise"):
        scaffold.plan("my_op", tmp_path, kind="columnwise")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.cuda
@pytest.mark.parametrize("fixture", ["schema_op", "schema_aten_op", "rowwise_op", "rowwise_aten_op"])
def test_cuda_ops_run_their_cuda_tests_on_the_gpu(request, fixture):
    made = request.getfixturevalue(fixture)
    assert made.tests.returncode == 0, made.output
    assert made.skipped == 0 and made.failed == 0, made.output
    assert made.passed >= 80, made.output  # every case ran on both devices


SWAP = """
    import json, re, sys, torch, jit_loader
    from pathlib import Path
    folder = Path(sys.argv[1])
    name = folder.name
    op = jit_loader.load(folder)
    import importlib.util
    spec = importlib.util.spec_from_file_location("_r", folder / "reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    args = ref.example_inputs("cuda", torch.float32, (8, 64))
    fn = getattr(op, name)
    before = fn(*args)
    cu = folder / (name + "_cuda.cu")
    text = cu.read_text()
    edited = re.sub(r"from_acc<T>\\(forward\\(", "from_acc<T>(2 * forward(", text, count=1)
    assert edited != text
    cu.write_text(edited)
    jit_loader.load(folder)  # the edit: a kernel body only
    after = fn(*args)
    swapped = op.build.swapped_over is not None and not op.build.compiled
    cu.write_text(text)
    print(json.dumps({"swapped": swapped, "doubled": torch.allclose(after, 2 * before)}))
"""


@pytest.mark.cuda
@pytest.mark.parametrize("fixture", ["schema_op", "schema_aten_op", "rowwise_op", "rowwise_aten_op"])
def test_every_scaffolded_op_swaps_a_kernel_edit_on_the_gpu(request, fixture):
    """A kernel-body edit of any scaffolded op (both kinds, both ABIs) runs at the next call
    without a build: NVRTC compiles it into the live process."""
    made = request.getfixturevalue(fixture)
    out = json_result(run_python(SWAP, made.op_dir, env=_env()))
    assert out == {"swapped": True, "doubled": True}


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
    for args in (["my_op", "--dir", str(tmp_path)], ["9lives", "--dir", str(tmp_path)]):
        out = run_cli("new", *args, timeout=300)
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
