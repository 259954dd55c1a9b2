"""Python and the command line run in a new interpreter, as the tests' scenarios run them:
the one way a test starts a process.

The loader's contract is about processes (what a fresh one finds on disk, what a killed
one leaves behind, what several at once do), so most scenarios run their code in a new
interpreter against a private loader cache and read back the JSON it prints last::

    env = private_env(tmp_path / "cache")
    r = json_result(run_python(CODE, str(op_dir), env=env))
    listing = run_cli("list", "--json", env=env)

Every process starts in the repository root unless told otherwise, with text output
captured, and with the environment of :func:`child_env` unless given another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str | None) -> dict:
    """This process's environment for a new one: the repository importable (its root first
    on PYTHONPATH), without JIT_LOADER_VERBOSE. ``extra`` is set last; a variable given as
    None is removed (``PYTHONPATH=None``: only what is installed is importable)."""
    path = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                         if p and p != str(ROOT)]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    env.pop("JIT_LOADER_VERBOSE", None)
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def private_env(cache: Path, **extra: str | None) -> dict:
    """:func:`child_env` with the loader cache at ``cache`` (JIT_LOADER_CACHE) and the CUDA
    arch list 9.0 where the environment names none; ``extra`` is set last."""
    first = {"JIT_LOADER_CACHE": str(cache),
             "JIT_LOADER_CUDA_ARCH": os.environ.get("JIT_LOADER_CUDA_ARCH", "9.0")}
    return child_env(**{**first, **extra})


def run_interpreter(*argv, env: dict | None = None, cwd: Path = ROOT,
                    timeout: float = 900) -> subprocess.CompletedProcess:
    """``python *argv`` (each made a str) with this interpreter, e.g.
    ``run_interpreter("-m", "pip", "wheel", ...)``; ``env`` None: :func:`child_env`."""
    return subprocess.run([sys.executable, *map(str, argv)], cwd=cwd,
                          env=child_env() if env is None else env,
                          capture_output=True, text=True, timeout=timeout)


def run_cli(*args, env: dict | None = None, cwd: Path = ROOT,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m jit_loader *args``, e.g. ``run_cli("list", "--json", env=env)``."""
    return run_interpreter("-m", "jit_loader", *args, env=env, cwd=cwd, timeout=timeout)


def run_python(code: str, *args, env: dict | None = None, cache: Path | None = None,
               cwd: Path = ROOT, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a new interpreter, ``args`` its ``sys.argv[1:]``.
    ``cache`` is short for ``env=private_env(cache)``; with neither, :func:`child_env`."""
    if cache is not None:
        if env is not None:
            raise TypeError("run_python takes env or cache, not both")
        env = private_env(cache)
    return run_interpreter("-c", textwrap.dedent(code), *args, env=env, cwd=cwd, timeout=timeout)


def start_interpreter(*argv, env: dict | None = None, cwd: Path = ROOT,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
    """``run_interpreter`` without waiting: the live process, its output as text (piped
    unless ``stdout``/``stderr`` say otherwise), for ``wait_for`` or a signal."""
    return subprocess.Popen([sys.executable, *map(str, argv)], cwd=cwd,
                            env=child_env() if env is None else env,
                            stdout=stdout, stderr=stderr, text=True)


def start_python(code: str, *args, env: dict | None = None, cwd: Path = ROOT,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
    """``run_python`` without waiting (see ``start_interpreter``)."""
    return start_interpreter("-c", textwrap.dedent(code), *args, env=env, cwd=cwd,
                             stdout=stdout, stderr=stderr)


def wait_for(proc: subprocess.Popen, timeout: float = 900) -> subprocess.CompletedProcess:
    """The outcome of a process ``start_python`` or ``start_interpreter`` started, once it
    exits, as ``run_python`` gives it."""
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def json_result(proc: subprocess.CompletedProcess):
    """The JSON value the process printed on its last line of stdout; it must have exited
    with status 0 (else the assertion shows its stdout and stderr)."""
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
