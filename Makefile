# Two entry points, each doing all set-up on a fresh machine:
#   make demo   build every op, check it against its reference, short benchmark
#   make test   the test suite (CPU tests everywhere, CUDA tests where a GPU is visible)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test gpu-test gpu-bench clean-cache

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -r requirements.txt
	touch $@

demo: $(VENV)/.installed
	$(PY) experiments/run_all.py

test: $(VENV)/.installed
	$(PY) -m pytest

# On a machine whose python already has torch, ninja and pytest (e.g. a GPU node):
gpu-test:
	$(PYTHON) -m pytest

gpu-bench:
	$(PYTHON) experiments/run_all.py

clean-cache:
	$(PYTHON) -m jit_loader clean
