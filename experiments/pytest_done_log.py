"""A pytest plugin for runs that may be cut short: each test's node id is appended to the
file named by $PYTEST_DONE_LOG when it ends, so a later call runs only what is left
(`experiments/gpu_run.sh rest`).

    python3 -m pytest -p experiments.pytest_done_log ...
"""

from __future__ import annotations

import os


def pytest_runtest_logreport(report):
    path = os.environ.get("PYTEST_DONE_LOG")
    if path and report.when == "teardown":
        with open(path, "a", encoding="utf-8") as log:
            log.write(report.nodeid + "\n")
