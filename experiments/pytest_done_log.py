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

    python3 -m pytest -p experiments.pytest_done_log ...
"""

from __future__ import annotations

import os
import time

_STARTED: list[float] = []


def pytest_sessionstart(session):
    _STARTED.append(time.monotonic())


def pytest_runtest_logreport(report):
    path = os.environ.get("PYTEST_DONE_LOG")
    if path and report.when == "teardown":
        with open(path, "a", encoding="utf-8") as log:
            log.write(report.nodeid + "\n")
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
