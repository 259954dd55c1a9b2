"""``python -m jit_loader new``: a new op folder from the scaffold, and how to build, test
and use it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jit_tools import sources
from jit_tools.tools import scaffold

NAME = "new"
HELP = "scaffold a new op folder (schema, kernels, Python surface, reference, tests)"
DESCRIPTION = """\
Create the folder of a new op, NAME, that builds and passes its tests as generated. Two
kinds (--kind): elementwise (default; y = x * |x|, or with --schema an elementwise
placeholder over every argument of the schema) and rowwise (NAME(x, weight, eps): a
reduction over the last dimension of x with a weight broadcast over the rows, RMSNorm-shaped,
on the block reduction of ops/common/reduce.cuh). The files: NAME.h (the math, torch-free,
shared by CPU and CUDA), NAME_checks.h (the argument rules, declared once: the C++ checks and
the fake kernels read them), NAME_host.h (the checks), NAME_cpu.cpp and NAME_cpu.h (the CPU
loops over the math), NAME.cpp (schema and the CPU kernels' host side), NAME.py (Python
surface: fake kernels, autograd, a function and an nn.Module), reference.py (plain-PyTorch
reference, example_inputs, check_cases, TOLERANCES), __init__.py, test_NAME.py and
bench_NAME.py (the op against its reference, eager and compiled); with --cuda also
NAME_cuda.cu (torch-free kernels and launchers, hot-swapped on a GPU), NAME_cuda.h and
NAME_cuda.cpp (the CUDA host side). Replace the math in NAME.h and reference.py. The C++
host side is on the LibTorch stable ABI (STABLE_TORCH_LIBRARY, OPS_CHECK; the library loads
in later torch releases); with --aten it is on ATen (the full API, C++ autograd). Its
dispatcher namespace is NAME (torch.ops.NAME.forward and .backward). When --dir is a folder
named ops beside a tests folder (this repository's layout) the test file goes to
tests/test_NAME.py and the benchmark to experiments/bench_NAME.py (where that folder
exists); elsewhere both go into the op folder with a conftest.py registering the cuda
marker. Existing files are never overwritten."""
EPILOG = """\
example: python -m jit_loader new my_op --cuda && python -m pytest tests/test_my_op.py"""


def run(args) -> int:
    try:
        made = scaffold.create(args.name, args.dir, cuda=args.cuda, schema=args.schema,
                               aten=args.aten, kind=args.kind)
    except scaffold.ScaffoldError as e:
        print(f"new: {e}", file=sys.stderr)
        return 2
    cwd = Path.cwd()

    def shown(path: Path) -> str:
        # "./x" rather than "x": a bare name would mean the bundled op of that name
        return os.path.join(".", path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)

    print(f"created op {args.name!r} in {shown(made.op_dir)}:")
    for path in made.files:
        print(f"  {shown(path)}")
    print(f"\nbuild it:  python -m jit_loader build {shown(made.op_dir)}")
    print(f"test it:   python -m pytest {shown(made.test_file)}")
    print(f"time it:   python {shown(made.bench_file)} [--device cuda]")
    bundled = made.op_dir.parent == sources.OPS_DIR.resolve()  # load finds it by name
    where = args.name if bundled else shown(made.op_dir)
    print(f"use it:    op = jit_loader.load({where!r}); op.{args.name}(x)")
    return 0


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME",
                   help="the op's name: a folder, a Python module, a C++ namespace and the "
                        "torch.ops namespace at once (letters, digits, underscores)")
    p.add_argument("--cuda", action="store_true",
                   help="also generate the CUDA kernel (NAME_cuda.cu) and its host side (NAME_cuda.cpp); "
                        "they are compiled only where nvcc and a CUDA build of torch are present")
    p.add_argument("--aten", action="store_true",
                   help="write the C++ host side against ATen (ATen/ATen.h, TORCH_LIBRARY) rather "
                        "than the stable ABI: the full API and C++ autograd, a slower rebuild, a "
                        "library that loads only in the torch it was built with")
    p.add_argument("--kind", choices=["elementwise", "rowwise"], default="elementwise",
                   help="elementwise (default): every output entry from the same entries of the "
                        "inputs; rowwise: NAME(Tensor x, Tensor weight, float eps=1e-06), each row "
                        "of x's last dimension reduced to a statistic that scales it (RMSNorm-shaped)")
    p.add_argument("--schema", metavar="SCHEMA",
                   help='the elementwise op\'s arguments, e.g. "NAME(Tensor x, Tensor weight, '
                        'float eps=1e-06) -> Tensor" (Tensor, float, int, bool; one Tensor result), '
                        "on either ABI: every file follows it, with one gradient per tensor argument "
                        "and an elementwise placeholder math to replace (default: NAME(Tensor x) -> "
                        "Tensor, y = x * |x|)")
    p.add_argument("--dir", metavar="PATH",
                   help="create the op folder in PATH (created if missing; default: ./ops when the "
                        "current folder has one, else the current folder). The op loads from any "
                        "folder: ops/common's headers are always on the include path")
