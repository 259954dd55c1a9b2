"""Shared pytest configuration: device parametrisation, the CUDA marker, one folder of
shared build pieces for every cache the tests create, and ``once`` for what a whole run
builds once."""

from __future__ import annotations

import os
import pickle
import shutil

import pytest
import torch
from filelock import FileLock

from jit_tools import store

# Tests build ops in many private caches; the pieces every op of one toolchain shares
# (the precompiled header set, the linker probe) are built once, in the main cache.
os.environ.setdefault("JIT_LOADER_SHARED_DIR", str(store.cache_dir() / "_shared"))
# The suite builds many ops with one toolchain: the pieces pay at once, so they are built
# before the first op, not in the background after it (the default for a user, whose
# one-off flag set must not wait for them; test_build_speed tests that default).
os.environ.setdefault("JIT_LOADER_SHARED_NOW", "1")
# ccache's store is shared likewise: a test that builds a bundled op in its private cache
# compiles what another test already compiled, and gets ccache's hit instead (the private
# build folder, key, lock and link are still its own). A test about the store itself
# gives its processes their own (JIT_LOADER_CCACHE_DIR=None).
os.environ.setdefault("JIT_LOADER_CCACHE_DIR", str(store.cache_dir() / "_ccache"))

# Under pytest-xdist each worker gets its share of the cores for torch's CPU threads (and
# passes it to the processes it starts): N workers with a thread per core each make OpenMP
# spin against itself, and a CPU gradcheck that takes 12 s alone took 370 s so.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # Likewise each worker's builds: Ninja's -j is its share of the cores, at least 2 (so a
    # build still compiles two units at once while the other workers run Python), not
    # -j<all cores> in every worker (16 workers on a 16-core host: up to 256 compilers).
    os.environ.setdefault("MAX_JOBS", str(max(2, (os.cpu_count() or 1) // _WORKERS)))
# torch.compile compiles in the process that calls it: by default inductor starts a pool of
# compile processes, one per core, in every process that compiles (each pool process
# imports torch), and the suite runs many such processes side by side.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

HAS_CUDA = torch.cuda.is_available()

# Every device test runs on CPU everywhere and on CUDA where a GPU is present
# (skipped, and reported as such, where none is).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture
def nvrtc_logs(monkeypatch) -> list[str]:
    """The log of every NVRTC compile the test runs, in order (through the precompiled
    header, its notes say whether one was made or used)."""
    from jit_tools.swap import nvrtc

    logs: list[str] = []
    real = nvrtc.run_nvrtc

    def recording(source, text, names, options, want_cubin):
        result = real(source, text, names, options, want_cubin)
        logs.append(result[1])
        return result

    monkeypatch.setattr(nvrtc, "run_nvrtc", recording)
    return logs


# A fixture's build waits at most this long for another test process making the same.
ONCE_WAIT_S = 3600


@pytest.fixture(scope="session")
def once(tmp_path_factory):
    """``once(name, make)``: ``make(folder)``'s value, made by the first test process of the
    run to ask, in a folder every process of the run shares, and read back by the others.

    A module-scoped fixture runs in every pytest-xdist worker that runs one of its tests,
    so a build that several tests share (a wheel, a scaffolded op, an exported model) was
    made by as many workers at once. The value must pickle; the tests must not change the
    folder (other processes read it at the same time)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own

    def made(name: str, make):
        folder, value = root / f"once-{name}", root / f"once-{name}.pickle"
        with FileLock(str(root / f"once-{name}.lock"), timeout=ONCE_WAIT_S):
            if value.exists():
                return pickle.loads(value.read_bytes())
            shutil.rmtree(folder, ignore_errors=True)  # a failed attempt's
            folder.mkdir()
            result = make(folder)
            value.write_bytes(pickle.dumps(result))
            return result

    return made
