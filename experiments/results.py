"""The results page, rendered from the JSON each benchmark writes.

    python -m experiments.results                 # experiments/results/*.json -> RESULTS.md
    python -m experiments.results --check         # exit 1 where RESULTS.md is not the rendering

Each benchmark's script writes one JSON document (``benchutil.save_json``; the suite's
``bench.json``) with ``benchmark`` (its name), ``environment`` (device, torch, CUDA, date,
commit, command) and its rows. A GPU run writes them under ``$OUT/results/``
(``experiments/gpu_run.sh``, ``experiments/ddp_run.sh``); they are committed into
``experiments/results/``. The page holds one table per benchmark of :data:`SECTIONS`, from
its newest document, and one line for each benchmark without one. Older figures are in
git's history, not on the page.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
PAGE = HERE / "RESULTS.md"
MAX_PAGE_LINES = 500


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict], columns: list[str]) -> list[str]:
    """A Markdown table of ``rows``."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]


def _rows(doc: dict) -> tuple[list[dict], list[str]] | None:
    """A document's rows and the columns its script chose (every field of its rows, in the
    order they first appear, where it chose none)."""
    rows = doc.get("rows")
    if not rows:
        return None
    return rows, doc.get("columns") or list(dict.fromkeys(f for r in rows for f in r))


def _targets(doc: dict) -> tuple[list[dict], list[str]] | None:
    """The suite's cases that carry a target, against it."""
    if doc.get("copy_ceiling") is None:
        return None  # the cases section did not run
    rows = [dict(r, ours_us=r["median_us"], ratio=f"{r['ratio']:.3g}x", target=f"{r['target']:g}x")
            for r in doc.get("records", []) if r.get("target") is not None]
    return rows, ["op", "pass", "shape", "dtype", "baseline", "ours_us", "baseline_us", "ratio",
                  "target", "met", "reason"]


def _overhead(doc: dict) -> tuple[list[dict], list[str]] | None:
    """The call-overhead rows that have a limit (the others, the floors, are in the JSON)."""
    rows = [dict(r, ratio=f"{r['ratio']:.3g}x", limit=f"{r['limit']:.3g}x")
            for r in doc.get("overhead") or [] if r.get("limit") is not None]
    if not rows:
        return None
    return rows, ["op", "pass", "mode", "device", "shape", "ours_us", "native_us", "ratio", "limit",
                  "within"]


def _records(doc: dict) -> tuple[list[dict], list[str]] | None:
    """A per-op script's cases (a view of the suite): every record."""
    rows = [dict(r, ratio=f"{r['ratio']:.3g}x") for r in doc.get("records", [])]
    if not rows:
        return None
    return rows, ["op", "pass", "shape", "dtype", "impl", "median_us", "gbps", "baseline",
                  "baseline_us", "ratio", "target", "met"]


@dataclasses.dataclass(frozen=True)
class Section:
    """One benchmark on the page: the documents it reads (their ``benchmark``), the table it
    makes of one (at most ``max_rows`` rows), and the command that writes one on the GPU
    machine."""
    id: str  # the name comments elsewhere use for it ("experiments/RESULTS.md, section lltm")
    title: str
    benchmark: str
    command: str
    about: str
    rows: Callable[[dict], tuple[list[dict], list[str]] | None] = _rows
    max_rows: int = 20


GPU_RUN = "bash experiments/gpu_run.sh"
SECTIONS = (
    Section("correctness", "Correctness: the whole test suite", "tests",
            f"PYTEST_WORKERS=15 {GPU_RUN} env alltests",
            "Every test of `tests/`, CPU and CUDA cases.", max_rows=1),
    Section("kernel-suite", "Benchmark suite: the targets", "suite", f"{GPU_RUN} suite",
            "Ratio = baseline time / our time (> 1: ours faster), the baseline timed in the same "
            "run, interleaved; times are medians in us (CUDA events on a GPU). Every record, the "
            "plots and the cases without a target: `python -m experiments.bench --render "
            "experiments/results/suite.json`.", _targets, max_rows=60),
    Section("call-overhead", "Call overhead", "suite", f"{GPU_RUN} overhead",
            "Host time per call on one CPU thread, best of five runs of back-to-back calls; ratio "
            "= ours / native (< 1: ours cheaper). The CUDA graph floors and aten rows (no limit) "
            "are in the JSON.", _overhead, max_rows=26),
    Section("pointwise", "sigmoid and GELU (`bench_pointwise`)", "bench_pointwise", f"{GPU_RUN} bench",
            "The suite's pointwise cases with every baseline, on the device the view ran on.",
            _records, max_rows=25),
    Section("lltm-vs-eager", "LLTM against eager (`bench_lltm`)", "bench_lltm", f"{GPU_RUN} bench",
            "Forward and forward+backward at three sizes against the eager reference, through the "
            "C++ autograd kernel and the Python autograd.Function; ratio = eager time / ours.",
            _records, max_rows=12),
    Section("lltm", "LLTM: GPU time per kernel", "lltm-kernels", f"{GPU_RUN} lltmtimes",
            "Each kernel of the op's forward and backward, per iteration (the suite has the LLTM "
            "cases against eager).", max_rows=20),
    Section("loader-basics", "Loader basics: cold build, warm load, no-change check, one-unit edits",
            "loader", f"{GPU_RUN} loader", "Wall seconds on the GPU machine's host; tiny fixture ops.",
            max_rows=15),
    Section("cpp-edit", "A bundled op's `.cpp` edit with the shared pieces", "loader-shared-pieces",
            f"{GPU_RUN} cppedit", "Median and min wall seconds, CPU seconds of the process and its "
            "compilers; the shared pieces built before.", max_rows=24),
    Section("first-build", "The first build of a new flag set", "loader-first-build",
            f"{GPU_RUN} firstbuild", "Ours against `torch.utils.cpp_extension.load` of the same "
            "sources; each timing includes the loader's import.", max_rows=15),
    Section("kernel-edit-loop", "A kernel edit to its first result", "loader-edit-loop",
            f"{GPU_RUN} editloop", "jit_loader (the edit swapped in through NVRTC) against CuPy and "
            "Triton, caches private and empty.", max_rows=8),
    Section("math-edit", "A math-header edit to the CUDA and the CPU result", "loader-math-edit",
            f"{GPU_RUN} mathedit", "Seconds from the write of the file to the result; fresh cache "
            "and warm.", max_rows=21),
    Section("math-edit-cpu", "A math-header edit to the CPU result, on a machine without a GPU",
            "loader-math-edit-cpu", "python -m experiments.math_edit_cycle --ops sigmoid,gelu,resize,"
            "scaffold --rounds 5 --json experiments/results/math_edit_cpu.json", "Seconds from the "
            "write of the file to the result; fresh cache and warm (after the shared pieces).",
            max_rows=8),
    Section("stable-op", "A tiny op on the stable ABI, against tvm_ffi", "loader-stable",
            f"{GPU_RUN} stable", "Cold build with the shared pieces absent and present, a `.cpp` "
            "edit, and `tvm_ffi.cpp.load_inline` of the same function.", max_rows=12),
    Section("bundle-load", "Load from an unpacked bundle", "bundle-load", f"{GPU_RUN} bundle",
            "A fresh process with `JIT_LOADER_COMPILE=never`: median of the repeats, no compile.",
            max_rows=10),
    Section("first-use", "The first edit in a new process", "first-use", f"{GPU_RUN} firstuse",
            "An edit and a call in the first process of a new cache against a warm one.", max_rows=5),
    Section("sanitize", "compute-sanitizer on every op with CUDA kernels", "sanitize",
            f"{GPU_RUN} sanitize", "Each op's cases under each tool with its debug build; findings "
            "in the JSON.", max_rows=20),
    Section("debug-tools", "The debugging tools on planted bugs", "debug-tools",
            f"{GPU_RUN} debugtools", "sanitize() finds each planted bug at its lines in time; "
            "profile()'s bandwidth against the suite's.", max_rows=5),
    Section("ddp", "DDP training with the LLTM op: weak scaling", "ddp-scaling",
            "bash experiments/ddp_run.sh", "Efficiency = samples/s on N GPUs / (N x samples/s on one "
            "GPU), same size, backend and configuration.", max_rows=30),
)


def load(folder: Path = RESULTS_DIR) -> list[tuple[Path, dict]]:
    """Every result document in ``folder`` (JSON files with a ``benchmark`` and an
    ``environment``), by file."""
    docs = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise SystemExit(f"{path}: not JSON ({e})") from e
        if isinstance(doc, dict) and "benchmark" in doc and "environment" in doc:
            docs.append((path, doc))
    return docs


def _newest(section: Section, docs: list[tuple[Path, dict]]):
    found = [(doc["environment"].get("date") or "", path.name, path, doc, made)
             for path, doc in docs if doc["benchmark"] == section.benchmark
             and (made := section.rows(doc)) is not None]
    return max(found, key=lambda f: f[:2])[2:] if found else None


def _header(env: dict, path: Path) -> str:
    cuda = f" (CUDA {env['cuda']})" if env.get("cuda") else ""
    commit = f", commit `{env['commit']}`" if env.get("commit") else ""
    command = f": `{env['command']}`" if env.get("command") else ""
    return (f"{env.get('device', '?')}, torch {env.get('torch', '?')}{cuda}, {env.get('date', '?')}"
            f"{commit}{command} ([{path.name}](results/{path.name}))")


def render(docs: list[tuple[Path, dict]]) -> str:
    """The page: one table per section that has a document, one line for each that has not."""
    lines = ["# Results", "",
             "Rendered by `python -m experiments.results` from the JSON in `experiments/results/`, "
             "which the benchmarks write on the GPU machine (`experiments/gpu_run.sh`, "
             "`experiments/ddp_run.sh`: each stage writes `$OUT/results/NAME.json`; copy them "
             "into `experiments/results/` and render). Each table is its benchmark's newest run, "
             "with the device, torch version, date, commit and command that produced it. A ratio "
             "compares with a baseline timed in the same run, never across runs. Earlier figures "
             "are in git's history.", ""]
    missing = []
    for section in SECTIONS:
        newest = _newest(section, docs)
        if newest is None:
            missing.append(f"- {section.title}: no current run (`{section.command}`).")
            continue
        path, doc, (rows, columns) = newest
        lines += [f"<!-- section: {section.id} -->", f"## {section.title}", "",
                  f"{_header(doc['environment'], path)}. {section.about}", ""]
        lines += table(rows[:section.max_rows], columns)
        if len(rows) > section.max_rows:
            lines += ["", f"{len(rows) - section.max_rows} more rows in "
                          f"[{path.name}](results/{path.name})."]
        lines.append("")
    if missing:
        lines += ["## Benchmarks without a current run", "", *missing, ""]
    page = "\n".join(lines)
    if page.count("\n") > MAX_PAGE_LINES:
        raise ValueError(f"the results page would have {page.count(chr(10))} lines, more than "
                         f"{MAX_PAGE_LINES}: lower a section's max_rows")
    return page


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="the folder of JSON files")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write")
    parser.add_argument("--check", action="store_true", help="only check that the page is current")
    args = parser.parse_args(argv)
    page = render(load(args.results))
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != page:
            print(f"{args.out} is not the rendering of {args.results}: run python -m experiments.results")
            return 1
        return 0
    args.out.write_text(page)
    print(f"wrote {args.out} ({page.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
