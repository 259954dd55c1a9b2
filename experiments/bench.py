"""The benchmark suite: every op against its baselines on this machine's device, in one command.

    python -m experiments.bench                       # full sizes (GPU if visible, else CPU)
    python -m experiments.bench --quick               # smaller sizes, fewer repetitions
    python -m experiments.bench --ops gelu,lltm --out DIR
    python -m experiments.bench --render DIR/bench.json --results   # Markdown for RESULTS.md
    python -m experiments.bench --only overhead       # one section: cases or overhead

Two sections. ``cases``: every op against its baselines at several sizes (below).
``overhead``: the host time of one call of every op's Python function against its native
twin on tiny inputs, forward and forward+backward, CPU and (where the suite runs on a GPU)
CUDA, plus CUDA graph rows that show the floor (``experiments/bench_overhead.py``).

It writes into ``--out`` (default ``experiments/out/bench/``):

* ``bench.json``: ``environment`` (device, torch, CUDA, date, load), ``copy_ceiling``,
  ``warnings``, ``errors`` and ``records``: one per case, our implementation and
  baseline, with the fields of ``benchutil.RECORD_FIELDS`` (checked by
  ``benchutil.validate_record``);
* ``ratios.png``: one panel per op family (the script that defines the cases): per case
  (pass, size, dtype), the ratio to each baseline on a log axis (1 marked; > 1: ours
  faster), targets drawn as ticks, missed ones in red;
* ``bandwidth.png``: one panel per family with memory-bound cases: achieved GB/s next to
  ``clone()`` at the same traffic and the copy ceiling (a large ``clone()``), all from the
  same run;
* ``summary.md``: the targets (met / NOT MET, with the reason where one is out of
  reach) and every record as a table;
* in ``bench.json`` also ``overhead``: one row per call-overhead case, with the fields
  of ``benchutil.OVERHEAD_FIELDS`` (checked by ``benchutil.validate_overhead_row``), and
  its table in ``summary.md``. A run of the overhead section alone writes no plots.

Timing is ``benchutil.measure``: CUDA events after warm-up, median and IQR of many
interleaved repetitions, L2 flush for memory-bound cases, wall clock for host-bound ones;
warnings when the machine is loaded or a spread is wide. The exit status is non-zero
when a case failed its correctness check or raised; a missed target is reported, not
an error.

Adding an op (one registration): in its script ``experiments/bench_<op>.py`` define

    def suite_cases(device: str, scale: str) -> list[benchutil.Case]:
        ...

where ``scale`` is ``"tiny"`` (CI: CPU, seconds), ``"quick"`` or ``"full"``. Each
``benchutil.Case`` names op, pass, shape and dtype, gives ``build()`` (allocates fresh
random inputs, returns ``{"ours": fn, "<baseline>": fn, ...}``), the ideal ``bytes``
moved per call (memory-bound ops: GB/s, copy ceiling, L2 flush) or ``flops``, and
``targets`` (baseline name -> ratio the op's issue asks for; ``benchutil.COPY`` for a
fraction of the copy bandwidth). A case with ``device="cpu"`` runs on the CPU whatever
the suite's device (a CPU target reported by a GPU run). What cannot run on this machine
(say its baseline's package is absent) is returned as ``benchutil.Skipped(op, what,
reason)``: listed among the warnings, not an error. The suite imports every
``experiments/bench_*.py`` that defines ``suite_cases``; nothing else changes.

The script's own command line is a view of those cases, not a second copy: its
``main`` parses ``suite.view_parser``'s flags (``--device``, ``--quick``/``--tiny``, ``--json``,
``--threads``, ``--cpu-time``, ``--no-compile``) and its own, and calls ``suite.run_view``, which
runs its cases through the suite and prints them as one table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import shlex
import sys
import time
from pathlib import Path

import torch

from experiments import suite, suite_report
from experiments.benchutil import Case, Skipped

HERE = Path(__file__).resolve().parent


def suite_modules() -> list[str]:
    """Every experiments/bench_*.py module (this one aside), in name order."""
    return sorted(f"experiments.{m.name}" for m in pkgutil.iter_modules([str(HERE)])
                  if m.name.startswith("bench_"))


def collect_cases(device: str, scale: str, ops: list[str] | None,
                  errors: list[str], skipped: list[Skipped] | None = None) -> list[Case]:
    """The cases of every registered op (of ``ops`` when given); what an op cannot run
    here (``benchutil.Skipped``, with its reason) goes into ``skipped``."""
    cases = []
    for name in suite_modules():
        try:
            module = importlib.import_module(name)
        except (Exception, SystemExit) as e:  # one broken script must not hide every other op
            errors.append(f"import {name}: {type(e).__name__}: {e}")
            continue
        if not hasattr(module, "suite_cases"):
            continue
        try:
            found = module.suite_cases(device, scale)
        except Exception as e:
            errors.append(f"{name}.suite_cases: {type(e).__name__}: {e}")
            continue
        cases += suite.select(found, ops, skipped, family=name.removeprefix("experiments.bench_"))
    return cases


def collect_overhead(device: str, ops: list[str] | None, errors: list[str],
                     skipped: list[Skipped]) -> list:
    try:
        from experiments import bench_overhead  # a broken script must not stop the suite

        found = bench_overhead.overhead_cases(device)
    except Exception as e:
        errors.append(f"experiments.bench_overhead: {type(e).__name__}: {e}")
        return []
    return suite.select(found, ops, skipped)


def run_suite(device: str | None = None, scale: str = "full", ops: list[str] | None = None,
              out_dir: str | Path | None = None, progress: bool = True,
              command: str | None = None, sections=suite.SECTIONS, cpu_time: bool = False,
              cases: list[Case | Skipped] | None = None, clock=time.perf_counter) -> dict:
    """Run every registered case of ``sections`` (``cases``: these instead of every
    registered op's) through :func:`suite.run`; returns the JSON document (and writes the
    files into ``out_dir`` when given)."""
    device = suite.steady_state(device)
    errors: list[str] = []
    skipped: list[Skipped] = []
    if cases is None and "cases" in sections:
        cases = collect_cases(device, scale, ops, errors, skipped)
    overhead = collect_overhead(device, ops, errors, skipped) if "overhead" in sections else []
    return suite.run(device, scale, cases or [], overhead, ops=ops, out_dir=out_dir,
                     progress=progress, command=command, sections=sections, cpu_time=cpu_time,
                     clock=clock, found_errors=errors, skipped=skipped)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (CI on a CPU: seconds)")
    parser.add_argument("--ops", help="comma-separated op names (default: every registered op)")
    parser.add_argument("--only", choices=suite.SECTIONS,
                        help="one section: cases (ops against baselines) or overhead (call "
                             "overhead on tiny inputs)")
    parser.add_argument("--out", default="experiments/out/bench",
                        help="output folder (default experiments/out/bench)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when visible)")
    parser.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the overhead section's CPU rows by thread CPU time (a loaded "
                             "machine)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--render", metavar="JSON", help="only re-render the summary of a bench.json")
    parser.add_argument("--results", action="store_true",
                        help="print the summary as a section for experiments/RESULTS.md")
    args = parser.parse_args(argv)
    command = "python -m experiments.bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    if args.render:
        doc = json.loads(Path(args.render).read_text())
        print(suite_report.render_summary(doc, results=args.results, command=doc.get("command")))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = "tiny" if args.tiny else "quick" if args.quick else "full"
    ops = args.ops.split(",") if args.ops else None
    doc = run_suite(args.device, scale, ops, out_dir=args.out, progress=not args.no_progress,
                    command=command.strip(), sections=(args.only,) if args.only else suite.SECTIONS,
                    cpu_time=args.cpu_time)
    paths = {name: Path(args.out) / f for name, f in suite_report.output_names(doc).items()}
    print(suite_report.render_summary(doc, results=args.results, command=doc["command"]))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
