"""A pytest plugin for the GPU machine's runs of the whole suite.

* Runs that may be cut short: each test's node id is appended to the file named by
  ``$PYTEST_DONE_LOG`` when it ends, so a later call runs only what is left
  (``experiments/gpu_run.sh rest``).
* Why each test failed, as it fails: with ``$PYTEST_FAILURE_LOG``, the node id and pytest's
  report of each failure are appended there at once, so a run cut short by its time limit
  (before pytest's own summary) still says why.
* The correctness record: with ``$PYTEST_RESULTS_JSON``, the run's outcome (passed, failed,
  skipped, errors, seconds, workers) is written there as the results page reads it
  (experiments/results.py, benchmark ``tests``).
* A record across calls: with ``$PYTEST_OUTCOME_LOG``, each test's outcome is appended
  there as it ends, with the seconds of that phase; ``python -m experiments.pytest_done_log
  OUTCOME_LOG --json FILE`` writes the record of every run that appended to it (``alltests``,
  then ``rest``), and ``--slowest N`` lists the N tests that took longest and the seconds of
  every test together (what the workers had to share), which a run cut short cannot print.

    python3 -m pytest -p experiments.pytest_done_log ...
"""

from __future__ import annotations

import os
import time

_STARTED: list[float] = []
_WORKER: list[bool] = []


def pytest_configure(config):
    # Under pytest-xdist the controller gets every worker's reports too: it alone writes
    # the logs, each report once.
    _WORKER.append(hasattr(config, "workerinput"))


def pytest_sessionstart(session):
    _STARTED.append(time.monotonic())


def pytest_runtest_logreport(report):
    if _WORKER and _WORKER[0]:
        return
    path = os.environ.get("PYTEST_DONE_LOG")
    if path and report.when == "teardown":
        with open(path, "a", encoding="utf-8") as log:
            log.write(report.nodeid + "\n")
    outcomes = os.environ.get("PYTEST_OUTCOME_LOG")
    if outcomes and (report.when != "teardown" or report.outcome != "passed"):
        with open(outcomes, "a", encoding="utf-8") as log:
            log.write(f"{report.when}\t{report.outcome}\t{report.duration:.2f}\t{report.nodeid}\n")
    failures = os.environ.get("PYTEST_FAILURE_LOG")
    if failures and report.failed:
        with open(failures, "a", encoding="utf-8") as log:
            log.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    path = os.environ.get("PYTEST_RESULTS_JSON")
    if not path or hasattr(config, "workerinput"):  # the controller writes it, not each worker
        return
    from experiments import benchutil

    # As pytest's own summary line counts them.
    count = {k: len(terminalreporter.stats.get(k, [])) for k in ("passed", "failed", "skipped", "error", "xfailed")}
    row = {"passed": count["passed"], "failed": count["failed"], "skipped": count["skipped"],
           "errors": count["error"], "xfailed": count["xfailed"],
           "seconds": round(time.monotonic() - _STARTED[0], 1) if _STARTED else None,
           "workers": config.getoption("numprocesses", default=None), "exit_status": int(exitstatus)}
    benchutil.save_json(path, [row], "tests", list(row))


def _fields(line: str) -> tuple[str, str, float, str]:
    """(phase, outcome, seconds, node id) of one line of the outcome log."""
    when, outcome, seconds, nodeid = line.rstrip("\n").split("\t", 3)
    return when, outcome, float(seconds), nodeid


def summarize(lines, seconds: float | None = None, workers=None) -> dict:
    """The record of the outcome log's ``lines`` (``when<TAB>outcome<TAB>seconds<TAB>node id``), each
    test counted once by its last run (``rest`` runs again what a cut run left): failed if
    its call failed, an error if another phase failed, skipped if a phase skipped, passed
    if its call passed; one whose run was cut before its call ended is unfinished."""
    runs: dict[str, list[tuple[str, str]]] = {}
    for line in lines:
        when, outcome, _, nodeid = _fields(line)
        if when == "setup":
            runs[nodeid] = []  # a new run of the test
        runs.setdefault(nodeid, []).append((when, outcome))
    count = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "unfinished": 0}
    for seen in runs.values():
        if ("call", "failed") in seen:
            count["failed"] += 1
        elif any(o == "failed" for _, o in seen):
            count["errors"] += 1
        elif any(o == "skipped" for _, o in seen):
            count["skipped"] += 1
        elif ("call", "passed") in seen:
            count["passed"] += 1
        else:
            count["unfinished"] += 1
    bad = count["failed"] + count["errors"] + count["unfinished"]
    return {**count, "xfailed": 0, "seconds": seconds, "workers": workers, "exit_status": int(bad > 0)}


def slowest(lines, n: int) -> tuple[list[tuple[float, str]], float]:
    """The ``n`` tests of the outcome log's ``lines`` that took longest (setup, call and the
    teardowns the log holds, each test by its last run), and the seconds of all together."""
    took: dict[str, float] = {}
    for line in lines:
        when, _, seconds, nodeid = _fields(line)
        took[nodeid] = (0.0 if when == "setup" else took.get(nodeid, 0.0)) + seconds
    ranked = sorted(((s, nodeid) for nodeid, s in took.items()), reverse=True)
    return ranked[:n], sum(took.values())


def main(argv=None) -> int:
    import argparse

    from experiments import benchutil

    parser = argparse.ArgumentParser(description="The record of a suite run over several calls.")
    parser.add_argument("log", help="the $PYTEST_OUTCOME_LOG the runs appended to")
    parser.add_argument("--json", help="where the record goes (benchmark 'tests')")
    parser.add_argument("--slowest", type=int, metavar="N", help="list the N slowest tests")
    parser.add_argument("--seconds", type=float, help="the runs' time in all")
    parser.add_argument("--workers", type=int)
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8") as log:
        lines = log.readlines()
    if args.slowest:
        ranked, total = slowest(lines, args.slowest)
        for seconds, nodeid in ranked:
            print(f"{seconds:8.1f}s  {nodeid}")
        print(f"{total:8.1f}s  every test together")
    if not args.json:
        return 0
    row = summarize(lines, args.seconds, args.workers)
    benchutil.save_json(args.json, [row], "tests", list(row))
    print(", ".join(f"{k} {v}" for k, v in row.items() if v is not None))
    return 1 if row["exit_status"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
