"""``python -m jit_loader new NAME``: a new op folder in the project's op anatomy.

The generated op is small but complete, so that it builds and its tests pass before a
line of it is changed. Two kinds (``--kind``):

* ``elementwise`` (default): ``y = x * |x|`` (a signed square, whose gradient ``2 |x|``
  depends on the input), or with ``--schema "NAME(Tensor x, Tensor weight, float eps) ->
  Tensor"`` an elementwise placeholder over every argument of the schema;
* ``rowwise``: ``NAME(x, weight, eps)``, a reduction over the last dimension of x with a
  weight broadcast over the rows (RMSNorm-shaped: the row's mean square, then ``x s w``),
  kernels built on ops/common's block reduction.

Either way: a CPU kernel, optionally a CUDA kernel, the argument rules declared once
(``<name>_checks.h``, read by the C++ checks and the fake kernels), the Python surface with
its fake kernels and autograd, a plain-PyTorch reference, a test file and a benchmark
script. One replaces the math in ``<name>.h`` and the reference, then grows the rest.

The math (``<name>.h``) is compiled only by the CPU loops (``<name>_cpu.cpp``) and the CUDA
kernels (``<name>_cuda.cu``); the host glue includes their declarations (``<name>_cpu.h``,
``<name>_cuda.h``), so an edit of the math rebuilds no glue and takes the hot path on a GPU
(ARCHITECTURE.md, "Header edits"); every kernel starts through ``ops_common::launch``, so
every generated op swaps a kernel edit on a GPU.

The host side (``<name>.cpp``, ``<name>_cuda.cpp``) is written against the LibTorch stable
ABI by default (``STABLE_TORCH_LIBRARY``, ``TORCH_BOX``, ``OPS_CHECK``, the headeronly
dispatch): it rebuilds fastest and loads in later torch releases. ``--aten`` writes it
against ATen instead, for the full API and C++ autograd. Everything else is the same for
both. The files are the templates of jit_tools/tools/templates/ (``<kind>/`` for a kind's
own files, ``<kind>/<abi>/`` for its host side); jit_tools/tools/scaffold_schema.py computes
what the schema decides in them.

Where the files go: the op folder ``<dir>/<name>/``. When ``<dir>`` is a folder named
``ops`` beside a ``tests`` folder (this repository's layout), the test file goes to
``tests/test_<name>.py`` and, where an ``experiments`` folder is there too, the benchmark
to ``experiments/bench_<name>.py`` (the suite runs it); anywhere else both go into the op
folder, with a ``conftest.py`` that registers the ``cuda`` marker. Nothing is ever
overwritten.
"""

from __future__ import annotations

import keyword
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path

from jit_tools.errors import JitLoaderError
from jit_tools.tools import op_schema, scaffold_schema


class ScaffoldError(JitLoaderError, ValueError):
    """The op cannot be scaffolded (bad name, existing files)."""


_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")

# Words a C++ compiler rejects as a namespace or function name.
CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast
continue co_await co_return co_yield decltype default delete do double dynamic_cast else
enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid
typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())

# Dispatcher namespaces and folder names that are taken: torch's own libraries, and
# names the loader treats specially (ops/common holds shared headers).
RESERVED = frozenset({"aten", "prim", "prims", "torch", "c10", "at", "std", "cuda", "common",
                      "ops", "quantized", "_test", "jit_loader", "jit_tools"})


def validate_name(name: str) -> None:
    """Raise :class:`ScaffoldError` naming ``name`` unless it can be the op's folder,
    Python module, C++ namespace and dispatcher namespace all at once."""
    why = None
    if not _NAME_RE.match(name):
        why = ("must start with a letter and hold only ASCII letters, digits and "
               "underscores (it names a C++ namespace and a Python module)")
    elif "__" in name:
        why = "must not contain a double underscore (reserved in C++ identifiers)"
    elif keyword.iskeyword(name):
        why = "is a Python keyword"
    elif name in CPP_KEYWORDS:
        why = "is a C++ keyword"
    elif name in RESERVED:
        why = "is taken (a torch or C++ namespace, or a name the loader uses itself)"
    elif name.lower().startswith("test"):
        why = "must not start with 'test' (pytest would collect the op's own module as a test)"
    if why:
        raise ScaffoldError(f"invalid op name {name!r}: it {why}")


def default_dir(cwd: Path | None = None) -> Path:
    """``./ops`` when the current folder has one (the root of this repository or a
    project laid out like it), else the current folder."""
    cwd = Path.cwd() if cwd is None else cwd
    return cwd / "ops" if (cwd / "ops").is_dir() else cwd


def class_name(name: str) -> str:
    """``my_op`` -> ``MyOp``: the nn.Module of the surface (never equal to the function)."""
    camel = "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
    return camel if camel != name else camel + "Module"


@dataclass(frozen=True)
class Plan:
    name: str
    op_dir: Path
    files: dict[Path, str]     # path -> text, in writing order

    @property
    def test_file(self) -> Path:
        return next(p for p in self.files if p.name == f"test_{self.name}.py")

    @property
    def bench_file(self) -> Path:
        return next(p for p in self.files if p.name == f"bench_{self.name}.py")


def template_paths(kind: str, abi: str, cuda: bool) -> list[tuple[str, str]]:
    """(file in the op folder, its template under templates/) for one kind and ABI: the
    files both ABIs share, and the host side of ``abi``."""
    files = [("NAME.h", f"{kind}/NAME.h"), ("NAME_checks.h", f"{kind}/NAME_checks.h"),
             ("NAME_host.h", "NAME_host.h"), ("NAME_cpu.h", f"{kind}/NAME_cpu.h"),
             ("NAME_cpu.cpp", f"{kind}/NAME_cpu.cpp"), ("NAME.cpp", f"{kind}/{abi}/NAME.cpp")]
    if cuda:
        files += [("NAME_cuda.h", f"{kind}/NAME_cuda.h"), ("NAME_cuda.cu", f"{kind}/NAME_cuda.cu"),
                  ("NAME_cuda.cpp", f"{kind}/{abi}/NAME_cuda.cpp")]
    return files + [("NAME.py", "NAME.py"), ("reference.py", f"{kind}/reference.py"),
                    ("__init__.py", "__init__.py")]


def plan(name: str, directory: str | os.PathLike | None = None, cuda: bool = False,
         schema: str | None = None, aten: bool = False, kind: str = "elementwise") -> Plan:
    """The files ``new`` writes, without writing them; raises :class:`ScaffoldError`
    for a bad name, kind or schema, or when any of them exists already. The host side is on
    the stable ABI, or on ATen with ``aten``. ``kind`` is ``elementwise`` (``y = f(x)``, or of
    every argument of ``schema``, e.g. ``"NAME(Tensor x, Tensor weight, float eps) -> Tensor"``)
    or ``rowwise`` (a reduction over x's last dimension with a weight,
    jit_tools/tools/scaffold_schema.py)."""
    validate_name(name)
    if kind not in scaffold_schema.KINDS:
        raise ScaffoldError(f"--kind {kind!r}: the scaffold makes {', '.join(scaffold_schema.KINDS)}")
    try:
        parsed = scaffold_schema.schema_for(name, kind, schema)
    except op_schema.SchemaError as e:
        raise ScaffoldError(f"--schema: {e}") from None
    except ValueError as e:
        raise ScaffoldError(str(e)) from None
    base = (Path(directory).expanduser() if directory is not None else default_dir()).resolve()
    if base.exists() and not base.is_dir():
        raise ScaffoldError(f"--dir {str(base)!r} is a file, not a folder")
    op_dir = base / name
    if op_dir.exists() or op_dir.is_symlink():
        raise ScaffoldError(f"{op_dir} already exists; refusing to overwrite it "
                            "(choose another name or --dir, or remove that folder)")
    in_repo_layout = base.name == "ops" and (base.parent / "tests").is_dir()
    test_path = base.parent / "tests" / f"test_{name}.py" if in_repo_layout else op_dir / f"test_{name}.py"
    bench_in_experiments = in_repo_layout and (base.parent / "experiments").is_dir()
    bench_path = (base.parent / "experiments" / f"bench_{name}.py" if bench_in_experiments
                  else op_dir / f"bench_{name}.py")
    for path in (test_path, bench_path):
        if path.exists():
            raise ScaffoldError(f"{path} already exists; refusing to overwrite it "
                                "(choose another name, or remove that file)")
    beside = 'Path(__file__).resolve().parents[1] / "ops" / "%s"' % name
    fields = dict(
        scaffold_schema.fields(parsed, kind, "aten" if aten else "stable"),
        Class=class_name(name),
        op_dir_expr=beside if in_repo_layout else "Path(__file__).resolve().parent",
        bench_op_dir_expr=beside if bench_in_experiments else "Path(__file__).resolve().parent",
        devices=("    # CPU, and CUDA where a GPU is visible (the tester's default devices)" if cuda
                 else '    devices = ("cpu",)  # the op has no CUDA kernel'),
        devices_note=" on CPU and CUDA" if cuda else " on CPU",
    )
    for snippet in ("module", "module_test"):
        fields[snippet] = string.Template(template(f"{kind}/{snippet}.py")).substitute(fields)
    files = {op_dir / fname.replace("NAME", name): string.Template(template(path)).substitute(fields)
             for fname, path in template_paths(kind, "aten" if aten else "stable", cuda)}
    if not in_repo_layout:
        files[op_dir / "conftest.py"] = template("conftest.py")
    files[test_path] = string.Template(template("test_NAME.py")).substitute(fields)
    files[bench_path] = string.Template(template("bench_NAME.py")).substitute(fields)
    return Plan(name=name, op_dir=op_dir, files=files)


def create(name: str, directory: str | os.PathLike | None = None, cuda: bool = False,
           schema: str | None = None, aten: bool = False, kind: str = "elementwise") -> Plan:
    """Write the op folder (and its test and benchmark files); returns what was written."""
    p = plan(name, directory, cuda, schema, aten, kind)
    p.op_dir.parent.mkdir(parents=True, exist_ok=True)
    p.op_dir.mkdir()  # fails, rather than merge, if it appeared since plan()
    for path, text in p.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:  # "x": never overwrite
            f.write(text)
    return p


# --------------------------------------------------------------------------------------
# Templates: the files of templates/ (NAME stands for the op's name in their paths), read
# as string.Template, so C++ braces need no escaping; the fields of plan() ($name,
# $Class, ...) are filled in and $$ would be a dollar.
# --------------------------------------------------------------------------------------

TEMPLATES = Path(__file__).with_name("templates")


def template(path: str) -> str:
    """The text of ``templates/<path>.tmpl``."""
    return (TEMPLATES / f"{path}.tmpl").read_text(encoding="utf-8")
