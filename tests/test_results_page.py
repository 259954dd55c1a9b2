"""The results page (experiments/results.py): one table per benchmark from its newest JSON
document, with the run's device, torch, date, commit and command; one line for each
benchmark without one; at most 500 lines whatever the documents hold. The documents here
are hand-written fixtures (tests/fixtures/results) and documents the benchmarks' own
writers make in a temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from experiments import benchutil, results
from subproc import ROOT, run_interpreter, start_interpreter

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "results"


def loader_section() -> results.Section:
    return next(s for s in results.SECTIONS if s.benchmark == "loader")


def fixture_docs(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    shutil.copytree(FIXTURES, folder)
    return folder


def section(page: str, title: str) -> str:
    """The text of one section of the page (from its heading to the next)."""
    start = page.index(f"## {title}\n")
    end = page.find("\n## ", start + 1)
    return page[start:end if end >= 0 else None]


def test_without_documents_every_benchmark_has_one_line_saying_how_to_run_it(tmp_path):
    page = results.render(results.load(tmp_path))
    missing = section(page, "Benchmarks without a current run").splitlines()[2:]
    assert [line for line in missing if line] == [
        f"- {s.title}: no current run (`{s.command}`)." for s in results.SECTIONS]
    assert "|" not in page  # no table without a run


def test_each_table_carries_its_run_and_only_the_newest_run_shows(tmp_path):
    page = results.render(results.load(fixture_docs(tmp_path)))
    loader = section(page, loader_section().title)
    assert ("Fixture GPU, torch 2.0.0+fixture, 2000-01-03, commit `def5678`: "
            "`python -m experiments.bench_loader --json NEW` ([loader_new.json](results/loader_new.json))") in loader
    assert "| cold build, ATen.h + library.h | 1.5 | s |" in loader
    assert "old fixture row" not in page  # the older run of the same benchmark is not shown
    tests = section(page, "Correctness: the whole test suite")
    assert "| 10 | 0 | 1 | 0 | 0 | 99.5 | 15 | 0 |" in tests and "commit `abc1234`" in tests
    assert "`PYTEST_WORKERS" not in tests  # the command is the run's, not the suggested one


def test_the_suite_document_gives_the_targets_and_the_call_overhead(tmp_path):
    page = results.render(results.load(fixture_docs(tmp_path)))
    targets = section(page, "Benchmark suite: the targets")
    assert "| sigmoid | forward | 2^20 | float32 | torch.sigmoid | 10 | 12.5 | 1.25x | 1.1x | yes |  |" in targets
    assert "| **no** | fixture reason |" in targets
    assert "clone() of the same bytes" not in targets  # no target: not in this table
    overhead = section(page, "Call overhead")
    assert "| sigmoid | forward | eager | Fixture GPU | 8 | 3 | 2.5 | 1.2x | 1.25x | yes |" in overhead
    assert "cuda graph" not in overhead  # rows without a limit stay in the JSON
    other = section(page, "Benchmarks without a current run")
    assert "Benchmark suite" not in other and "Call overhead" not in other
    assert "- LLTM: GPU time per kernel: no current run" in other


def test_the_page_stays_within_500_lines_however_many_rows_the_runs_have(tmp_path):
    """Every benchmark with a run of a thousand rows: each table is cut at its bound and
    says how many rows its JSON has beyond it."""
    folder = tmp_path / "big"
    folder.mkdir()
    many = 1000
    for k, s in enumerate(results.SECTIONS):
        doc = json.loads((FIXTURES / "suite.json").read_text())
        doc["benchmark"] = s.benchmark
        doc["records"] = doc["records"][:2] * (many // 2)
        doc["overhead"] = doc["overhead"][:1] * many
        doc["rows"] = [{"measurement": f"row {i}", "value": float(i), "unit": "s"} for i in range(many)]
        (folder / f"{k:02d}_{s.benchmark}.json").write_text(json.dumps(doc))
    page = results.render(results.load(folder))
    assert page.count("\n") <= results.MAX_PAGE_LINES
    assert "Benchmarks without a current run" not in page
    loader = section(page, loader_section().title)
    assert f"{many - loader_section().max_rows} more rows in" in loader
    assert loader.count("| row ") == loader_section().max_rows


def test_what_the_benchmarks_write_is_what_the_page_reads(tmp_path):
    """benchutil.save_json (every benchmark script) and the pytest plugin's record of a
    whole-suite run, read back by the renderer with their commit and command."""
    folder = tmp_path / "results"
    benchutil.save_json(str(folder / "loader.json"), [{"measurement": "m", "value": 1.0, "unit": "s",
                                                      "text": "left out"}],
                        "loader", ["measurement", "value", "unit"])
    (tmp_path / "test_tiny.py").write_text(
        "import pytest\n\ndef test_a():\n    pass\n\n@pytest.mark.skip\ndef test_b():\n    pass\n\n"
        "def test_c():\n    assert False\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTEST_RESULTS_JSON=str(folder / "tests.json"),
               PYTEST_FAILURE_LOG=str(tmp_path / "failures.txt"),
               PYTEST_OUTCOME_LOG=str(tmp_path / "outcomes.txt"))
    env.pop("PYTEST_DONE_LOG", None)  # a whole-suite run's log of finished tests is not this run's
    proc = run_interpreter("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "experiments.pytest_done_log",
                           "-n", "0", str(tmp_path / "test_tiny.py"), env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one test fails, as intended
    page = results.render(results.load(folder))
    commit = benchutil.git_commit()  # RESULTS_COMMIT where set (a GPU run's), else git's
    loader = section(page, loader_section().title)
    assert "| m | 1 | s |" in loader and "left out" not in loader
    if commit:
        assert f"commit `{commit}`" in loader
    tests = section(page, "Correctness: the whole test suite")
    assert "python -m pytest -q" in tests
    row = json.loads((folder / "tests.json").read_text())["rows"][0]
    assert (row["passed"], row["failed"], row["skipped"], row["exit_status"]) == (1, 1, 1, 1)
    # The record across calls (alltests, then rest), from the outcome log: the same counts;
    # a second run of a test (rest runs again what a cut run left) counts by its last run.
    proc = run_interpreter("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "experiments.pytest_done_log",
                           "-n", "0", str(tmp_path / "test_tiny.py") + "::test_a", env=env, cwd=tmp_path,
                           timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_interpreter("-m", "experiments.pytest_done_log", str(tmp_path / "outcomes.txt"), "--json",
                           str(tmp_path / "across" / "tests.json"), env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 1  # test_c failed
    across = json.loads((tmp_path / "across" / "tests.json").read_text())["rows"][0]
    assert (across["passed"], across["failed"], across["skipped"], across["unfinished"]) == (1, 1, 1, 0)
    # Each failure's reason, written as it happened (a run cut short keeps them).
    failures = (tmp_path / "failures.txt").read_text()
    assert failures.startswith("==== test_tiny.py::test_c (call)\n") and "assert False" in failures
    assert "test_a" not in failures and "test_b" not in failures
    # The slowest tests, from the same log: each test once, the slowest first, and the total.
    proc = run_interpreter("-m", "experiments.pytest_done_log", str(tmp_path / "outcomes.txt"),
                           "--slowest", "2", env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[-1].endswith("every test together"), lines
    ranked = [(float(line.split("s  ")[0]), line.split("s  ")[1]) for line in lines[:2]]
    assert ranked[0][0] >= ranked[1][0] and len({name for _, name in ranked}) == 2, ranked
    assert all(name.startswith("test_tiny.py::") for _, name in ranked), ranked
    # Under pytest-xdist each report reaches the controller too: the logs hold it once.
    xdist_env = dict(env, PYTEST_OUTCOME_LOG=str(tmp_path / "xdist.txt"),
                     PYTEST_DONE_LOG=str(tmp_path / "xdist_done.txt"))
    proc = run_interpreter("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "experiments.pytest_done_log",
                           "-n", "2", str(tmp_path / "test_tiny.py") + "::test_a", env=xdist_env, cwd=tmp_path,
                           timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logged = [line.split("\t")[:2] for line in (tmp_path / "xdist.txt").read_text().splitlines()]
    assert logged == [["setup", "passed"], ["call", "passed"]], logged
    assert (tmp_path / "xdist_done.txt").read_text() == "test_tiny.py::test_a\n"


def test_a_run_on_a_machine_without_the_checkout_names_the_commit_it_is_given(monkeypatch):
    monkeypatch.setenv("RESULTS_COMMIT", "abc1234")
    assert benchutil.git_commit() == "abc1234"


def test_the_command_writes_the_page_and_checks_it(tmp_path):
    folder, page = fixture_docs(tmp_path), tmp_path / "RESULTS.md"
    assert results.main(["--results", str(folder), "--out", str(page)]) == 0
    assert page.read_text() == results.render(results.load(folder))
    assert results.main(["--results", str(folder), "--out", str(page), "--check"]) == 0
    page.write_text(page.read_text() + "a figure written by hand\n")
    assert results.main(["--results", str(folder), "--out", str(page), "--check"]) == 1


def test_the_committed_page_is_the_rendering_of_the_committed_documents():
    assert results.main(["--check"]) == 0


def test_rows_of_two_shapes_show_every_field(tmp_path):
    """A benchmark whose rows differ in their fields (the math-edit cycle's edits and its
    baselines) and that names no columns shows every field, in the order they appear."""
    doc = {"benchmark": "loader-math-edit", "environment": {"device": "Fixture GPU", "date": "2000-01-01"},
           "rows": [{"op": "sigmoid", "warm": 0.25}, {"op": "baseline", "route": "CuPy", "median": 0.1}]}
    (tmp_path / "math_edit.json").write_text(json.dumps(doc))
    page = results.render(results.load(tmp_path))
    table = section(page, "A math-header edit to the CUDA and the CPU result")
    assert "| op | warm | route | median |" in table
    assert "| baseline |  | CuPy | 0.1 |" in table


# One CPU-second, then a pause, so that a read sees all of it before the process ends.
SPIN = ("import time\nstarted = time.process_time()\nwhile time.process_time() - started < 1.0:\n"
        "    pass\ntime.sleep(1.5)\n")


def test_the_suite_profile_counts_cpu_by_the_test_folder_a_process_works_in(tmp_path):
    """experiments/suite_profile.py (gpu_run.sh's SUITE_PROFILE=1): a process that spins
    one CPU-second in a test's private folder is counted under that test's name."""
    out = tmp_path / "profile.json"
    # Outside pytest's own folder, whose test name would come first in the path.
    with tempfile.TemporaryDirectory() as elsewhere:
        folder = Path(elsewhere) / "pytest-7" / "popen-gw3" / "test_spinning_op0"
        folder.mkdir(parents=True)
        sampler = start_interpreter("-m", "experiments.suite_profile", "--out", out, "--interval", "0.1")
        try:
            time.sleep(1.0)  # its first read (processes already running count from then on)
            spun = run_interpreter("-c", SPIN, cwd=folder, timeout=60)
            assert spun.returncode == 0, spun.stderr
        finally:
            sampler.send_signal(signal.SIGTERM)
            sampler.wait(timeout=60)
    profile = json.loads(out.read_text())
    assert 0.7 <= profile["cpu_s_by_origin"].get("test_spinning_op", 0) <= 1.5, profile
    assert profile["cpu_s_by_kind"].get("python -c ...", 0) >= 0.7, profile
    assert profile["cores"] == os.cpu_count() and profile["samples"] >= 5, profile
