"""Command line of jit_loader: inspect, prebuild and clean the build cache; check the setup.

    python -m jit_loader list   [PATH ...] [--json]
    python -m jit_loader build  [OP ...] [--cuda-arch LIST] [-j N] [--verbose]
    python -m jit_loader clean  [OP ...] [--older-than DAYS] [--keep N] [--broken] [--dry-run]
    python -m jit_loader pack   OUT.tar.gz [OP ...] [--cuda-arch LIST]
    python -m jit_loader unpack OUT.tar.gz [--into DIR]
    python -m jit_loader doctor
    python -m jit_loader new    NAME [--cuda] [--aten [--schema SCHEMA]] [--dir PATH]
    python -m jit_loader sanitize OP [--tool TOOL] [--variants VARIANT]
    python -m jit_loader profile  OP [--case NAME] [--dtype DTYPE]

One module per command (``listing``, ``build``, ``clean``, ``pack``, ``unpack``, ``doctor``,
``new``, ``sanitize``, ``profile``), each with its ``NAME``, ``HELP``, ``DESCRIPTION``,
``add_arguments`` (where it takes any) and ``run``. Everything goes through the loader's own
pipeline (``op_key``, ``cached_builds``, ``build_in_use``, ``remove_build``, ``load_library``),
its toolchain and its cache store, so the command line sees the cache exactly as a loading
process does.
"""

from __future__ import annotations

import argparse
import sys

from jit_tools.errors import JitLoaderError
from jit_tools.tools.cli import build, clean, doctor, listing, new, pack, profile, sanitize, unpack

COMMANDS = (listing, build, clean, pack, unpack, doctor, new, sanitize, profile)

EPILOG = """\
examples:
  python -m jit_loader doctor                  is this machine ready to build ops?
  python -m jit_loader list                    what is built, and what would load now
  python -m jit_loader build                   prebuild every op in ops/ (e.g. on a login node)
  python -m jit_loader build lltm --cuda-arch "8.0;9.0"
  python -m jit_loader clean --older-than 30   drop builds older than a month
  python -m jit_loader pack ops.tar.gz gelu    gelu's build in one bundle; unpack installs it elsewhere
  python -m jit_loader new my_op --cuda        start a new op (CPU and CUDA kernels, tests)
  python -m jit_loader new rms --aten --schema "rms(Tensor x, Tensor weight, float eps) -> Tensor"
  python -m jit_loader sanitize my_op --tool all   the op's examples under compute-sanitizer
  python -m jit_loader profile my_op               per-kernel time, bandwidth, occupancy (ncu)

The cache lives in $JIT_LOADER_CACHE (default ~/.cache/jit_loader).
"""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m jit_loader",
        description="Build, inspect and clean the cache of jit_loader's C++/CUDA ops, "
                    "and check that this machine can build them.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.NAME, help=command.HELP, description=command.DESCRIPTION,
                           epilog=getattr(command, "EPILOG", None))
        if hasattr(command, "add_arguments"):
            command.add_arguments(p)
        p.set_defaults(func=command.run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except JitLoaderError as e:
        print(f"{args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
