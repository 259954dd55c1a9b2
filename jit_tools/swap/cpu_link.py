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
import shlex
import subprocess
from pathlib import Path

from jit_tools import key as keys, sources
from jit_tools.builder import ninja as builder, shared, toolchain
from jit_tools.log import logger

_SERIAL = itertools.count()

# Bounds of the compile and the link: a build that takes longer is left to the full build.
COMPILE_TIMEOUT_S = 600
LINK_TIMEOUT_S = 300


def link_ahead(store, name: str, op_dir: Path, config: dict, compiled: list[Path],
               hashes: dict[str, str], lock_fd: int) -> Path | None:
    """The library of the op's CPU-side objects compiled from the sources as they are now,
    or None (see the module docstring). The caller holds the build lock."""
    if not store.work_folder(name, builder.work_tag(op_dir, config)).joinpath("build.ninja").is_file():
        return None
    # Ninja runs in a work folder this process alone holds, as the full build's does; the
    # library goes beside it, so that it keeps its path when the folder is given back.
    claim = store.claim_work(name, builder.work_tag(op_dir, config))
    try:
        return _compile_and_link(claim.folder, name, compiled, hashes, lock_fd,
                                 {**os.environ, **shared.ccache_env(store.root)})
    finally:
        claim.release()


def _compile_and_link(work: Path, name: str, compiled: list[Path], hashes: dict[str, str],
                      lock_fd: int, env: dict) -> Path | None:
    host = [p for p in compiled if not sources.is_cuda_source(p, name)]
    objects = [f"{p.stem}.o" for p in host]
    try:
        listing = subprocess.run([toolchain.ninja(), "-t", "commands", f"{name}.so"], cwd=work,
                                 capture_output=True, text=True, timeout=60, check=True).stdout
        # A new file each time: a library is dlopened by its path, and the previous one
        # may still be mapped (overwriting it in place would corrupt it).
        out = work.parent / f"{name}.cpu-{os.getpid()}-{next(_SERIAL)}.so"
        link = _link_line(listing.strip().splitlines()[-1], name, objects, out)
        compile_run = subprocess.run(
            [toolchain.ninja(), "-j", toolchain.max_jobs(), *objects], cwd=work, env=env,
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, pass_fds=(lock_fd,))
        if compile_run.returncode != 0:
            return None  # the full build reports the error
        # Ninja's own line, run as Ninja runs it (it may try gold, then the default linker).
        subprocess.run(link, shell=True, cwd=work, env=env, capture_output=True, text=True,
                       timeout=LINK_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:
        logger.debug("op %r: CPU kernels not linked ahead (%s)", name, e)
        return None
    if keys.input_hashes(hashes) != hashes:
        return None  # edited meanwhile: not the sources the load saw
    return out


def _link_line(link: str, name: str, objects: list[str], out: Path) -> str:
    """Ninja's link command of the op (a shell line) with ``objects`` for its objects and
    ``out`` for its output, wherever they appear."""
    runs = re.compile(r"(?:(?<=\s)[\w.+-]+\.o(?=\s))(?:\s+[\w.+-]+\.o(?=\s))*")
    if not runs.search(link) or f"-o {name}.so" not in link:
        raise ValueError(f"unexpected link command: {link}")
    link = runs.sub(" ".join(shlex.quote(o) for o in objects), link)
    return link.replace(f"-o {name}.so", f"-o {shlex.quote(str(out))}")
