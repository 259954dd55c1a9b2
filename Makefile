# Two entry points, each doing all set-up on a fresh machine:
#   make demo   build every op, check it against its reference, short benchmark
#   make test   the test suite (CPU tests everywhere, CUDA tests where a GPU is visible)
#   make bench  every op against its baselines: JSON, plots and a summary in experiments/out/bench
# Both install requirements.txt and this project (editable) into $(VENV) first.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test bench gpu-test gpu-bench gpu-bench-suite clean-cache

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --no-cache-dir -r requirements.txt
	$(PY) -m pip install --no-deps -e .
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m experiments.run_all

# Test processes: one per core by default (the tests build real ops; builds are CPU-bound).
PYTEST_WORKERS ?= auto

test: $(VENV)/.installed
	$(PY) -m pytest -n $(PYTEST_WORKERS)

bench: $(VENV)/.installed
	$(PY) -m experiments.bench

# On a machine whose python already has torch, ninja and pytest (e.g. a GPU node),
# run from the repository root:
gpu-test:
	$(PYTHON) -m pytest

gpu-bench:
	$(PYTHON) -m experiments.run_all

gpu-bench-suite:
	$(PYTHON) -m experiments.bench

clean-cache:
	$(PYTHON) -m jit_loader clean
