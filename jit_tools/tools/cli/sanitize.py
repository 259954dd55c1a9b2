"""``python -m jit_loader sanitize OP``: the op's check cases under compute-sanitizer."""

from __future__ import annotations

import sys

import torch

from jit_tools import sources
from jit_tools.tools import nvtools, op_cases, sanitize

NAME = "sanitize"
HELP = "run an op's example inputs under compute-sanitizer (memcheck, racecheck, initcheck, synccheck)"
DESCRIPTION = """\
Run each case of the op's reference.check_cases (what jit_loader.check_op runs), forward and
backward, in a fresh process under compute-sanitizer, with the op's debug build and PyTorch's
caching allocator off, and print each finding at the op's own file:line. --variants adds
inputs that take other paths through the kernels: noncontiguous, offset (misaligned starts),
empty, one (a single element or batch entry). Exit status 1 when a tool found anything."""
EPILOG = """\
examples:
  python -m jit_loader sanitize sigmoid
  python -m jit_loader sanitize lltm --tool racecheck --tool initcheck
  python -m jit_loader sanitize resize --tool all --variants all"""


def add_arguments(p) -> None:
    p.add_argument("op", metavar="OP", help="an op folder name under ops/ or the path of any op folder")
    p.add_argument("--tool", action="append", choices=[*sanitize.TOOLS, "all"],
                   help="the compute-sanitizer tool; repeatable; all: every one (default memcheck)")
    p.add_argument("--variants", action="append", choices=[*op_cases.VARIANTS, "all"],
                   help="input variants besides the declared inputs; repeatable (default: declared)")
    p.add_argument("--case", action="append", metavar="NAME", help="only this check case (repeatable)")
    p.add_argument("--dtype", action="append", metavar="DTYPE",
                   help="only this dtype of each case, e.g. float32 (repeatable; default: every one the case declares)")
    p.add_argument("--no-backward", action="store_true", help="forward calls only")
    p.add_argument("--timeout", type=float, default=sanitize.DEFAULT_TIMEOUT,
                   help="seconds each tool may run (default %(default)s)")


def selected(values, every) -> list[str]:
    return list(every) if values and "all" in values else list(dict.fromkeys(values or []))


def calls_of(args):
    """(op folder, calls) of the command line's op, cases, dtypes and variants."""
    op_dir = sources.resolve_op_dir(args.op)
    variants = ["declared", *selected(args.variants, op_cases.VARIANTS)]
    dtypes = [getattr(torch, d) for d in args.dtype] if args.dtype else None
    calls = op_cases.op_calls(op_dir, "cuda", list(dict.fromkeys(variants)), dtypes,
                              backward=False if args.no_backward else None, cases=args.case)
    return op_dir, calls


def run(args) -> int:
    nvtools.find("compute-sanitizer", "jit_loader.sanitize")  # the tool and a GPU first: clear errors
    nvtools.needs_gpu("jit_loader.sanitize")
    try:
        op_dir, calls = calls_of(args)
    except ValueError as e:
        print(f"sanitize: {e}", file=sys.stderr)
        return 2
    found = 0
    for tool in selected(args.tool, sanitize.TOOLS) or ["memcheck"]:
        report = sanitize.run_calls(calls, [op_dir], tool, timeout=args.timeout)
        print(report)
        found += not report.clean
    return 1 if found else 0
