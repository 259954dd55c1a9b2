"""``python -m jit_loader profile OP``: each kernel of the op's check cases, through ncu."""

from __future__ import annotations

import sys

from jit_tools.tools import nvtools, profile
from jit_tools.tools.cli import sanitize as sanitize_command

NAME = "profile"
HELP = "profile each kernel an op's example inputs launch (ncu: time, bandwidth, FLOP rate, occupancy)"
DESCRIPTION = """\
Run the op's check cases (reference.check_cases, as jit_loader.check_op does) in a fresh
process under Nsight Compute (ncu) and print, per kernel launched, its time, DRAM bandwidth
and FLOP rate against the device's peaks, occupancy, registers per thread, shared memory and
launch configuration. Each call runs once to warm up, then once profiled. Without ncu,
torch.profiler's kernel times in this process, saying what is missing."""
EPILOG = """\
examples:
  python -m jit_loader profile sigmoid --case function --dtype float32
  python -m jit_loader profile lltm --no-backward"""


def add_arguments(p) -> None:
    p.add_argument("op", metavar="OP", help="an op folder name under ops/ or the path of any op folder")
    p.add_argument("--case", action="append", metavar="NAME", help="only this check case (repeatable)")
    p.add_argument("--dtype", action="append", metavar="DTYPE",
                   help="only this dtype of each case, e.g. float32 (repeatable)")
    p.add_argument("--no-backward", action="store_true", help="forward calls only")
    p.add_argument("--clock-control", choices=("none", "base"), default="none",
                   help="ncu's clock control: none (default) leaves the clocks as the benchmarks run "
                        "them; base locks them to the base clocks")
    p.add_argument("--timeout", type=float, default=profile.DEFAULT_TIMEOUT,
                   help="seconds ncu may run (default %(default)s)")


def run(args) -> int:
    args.variants = None
    nvtools.needs_gpu("jit_loader.profile")
    try:
        op_dir, calls = sanitize_command.calls_of(args)
    except ValueError as e:
        print(f"profile: {e}", file=sys.stderr)
        return 2
    report = profile.run_calls(calls, [op_dir], timeout=args.timeout,
                               clock_control=args.clock_control)
    print(report)
    return 0
