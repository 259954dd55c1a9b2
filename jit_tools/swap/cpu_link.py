"""A live edit's CPU kernels, linked ahead of its full build.

A CPU call after a math edit waits for the rebuilt CPU loops (``jit_tools/swap/gate.py``).
The full build also compiles the ``.cu`` with nvcc, which takes seconds (tens for a large
kernel file) and is not what the CPU side needs. So the background build first compiles
the op's host objects that CUDA builds alone do not need (every source but the ``.cu`` and
``*_cuda.cpp``) in the op's Ninja work folder and links them, alone, into a library whose
CPU kernel blocks the gate then serves; the full build follows and is published as usual
(its CPU objects come back from ccache). Where that cannot be done (no work folder of this
configuration, an object that needs the CUDA ones, a compile error, the sources edited
meanwhile), the gate waits for the full build, which reports any error.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import time
from pathlib import Path

from jit_tools import key as keys
from jit_tools.builder import ninja as builder, speedups, toolchain
from jit_tools.log import logger

_SERIAL = itertools.count()

# The bound of the compile and the link: a build that takes longer is left to the full build.
BUILD_TIMEOUT_S = 900


def link_ahead(store, name: str, op_dir: Path, config: dict, hashes: dict[str, str],
               lock_fd: int) -> Path | None:
    """The library of the op's CPU-side objects compiled from the sources as they are now,
    or None (see the module docstring). The caller holds the build lock."""
    if not store.work_folder(name, builder.work_tag(op_dir, config)).joinpath("build.ninja").is_file():
        logger.debug("op %r: CPU kernels not linked ahead (no work folder of this configuration)", name)
        return None
    # Ninja runs in a work folder this process alone holds, as the full build's does; the
    # library goes beside it, so that it keeps its path when the folder is given back.
    claim = store.claim_work(name, builder.work_tag(op_dir, config))
    try:
        return _compile_and_link(claim.folder, name, hashes, lock_fd,
                                 {**os.environ, **speedups.ccache_env(store.root)})
    finally:
        claim.release()


def _compile_and_link(work: Path, name: str, hashes: dict[str, str], lock_fd: int,
                      env: dict) -> Path | None:
    target = f"{name}.cpu.so"  # the CPU units alone, linked (builder/ninja_file.py)
    started = time.perf_counter()
    try:
        run = subprocess.run([toolchain.ninja(), "-j", toolchain.max_jobs(), target], cwd=work,
                             env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                             pass_fds=(lock_fd,))
    except (OSError, subprocess.SubprocessError) as e:
        logger.debug("op %r: CPU kernels not linked ahead (%s)", name, e)
        return None
    if run.returncode != 0:  # the full build reports the error
        logger.debug("op %r: CPU kernels not linked ahead (ninja %s: %s)", name, target,
                     (run.stdout + run.stderr).strip().splitlines()[-1:])
        return None
    if keys.input_hashes(hashes) != hashes:
        logger.debug("op %r: CPU kernels linked ahead not used (edited meanwhile)", name)
        return None
    # A new file each time: a library is dlopened by its path, and the previous one may
    # still be mapped (overwriting it in place would corrupt it).
    out = work.parent / f"{name}.cpu-{os.getpid()}-{next(_SERIAL)}.so"
    os.replace(work / target, out)
    units = ", ".join(Path(p).name for p in re.findall(r" -c (\S+)", run.stdout)) or "nothing"
    logger.debug("op %r: CPU kernels linked ahead in %.2f s (compiled %s)", name,
                 time.perf_counter() - started, units)
    return out
