"""The shared pieces a process loads into itself, beside the ones a build uses: the C++
autograd kernel of ``register_autograd_op`` (``jit_tools/autograd.py``) and the fast Python
entry of ``fast_op`` (``jit_tools/fastcall.py``). Each is compiled once per exact torch
build (and Python) into ``<cache>/_shared/`` as :mod:`jit_tools.builder.shared` builds its
pieces, under a lock into a folder renamed into place. By default a process that finds
one missing starts its build in a detached background process at low priority and goes on
without it; :func:`pieces_arrived` and :func:`building` say, without touching the file
system, when such a build has finished, so that the process takes the piece up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import torch

from jit_tools import key as keys
from jit_tools.builder import shared, toolchain
from jit_tools.log import logger
from jit_tools.store import CacheStore


AUTOGRAD_SOURCE = keys.CSRC / "jit_loader_autograd.cpp"
AUTOGRAD_LIBRARY = "jit_loader_autograd.so"


def autograd_command(cxx: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of the C++ autograd piece: torch's headers and the
    C++ ABI of this torch build, linked against libc10 and libtorch_cpu only (no Python)."""
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    flags = ["-O2", "-fPIC", "-std=c++20", "-fvisibility=hidden",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             *(f"-isystem{p}" for p in toolchain.torch_include_paths())]
    return flags, [f"-L{torch_lib}", "-lc10", "-ltorch_cpu", *keys.DEFAULT_LDFLAGS]


def autograd_piece(root: Path, now: bool = True) -> Path | None:
    """The loader's C++ autograd kernel (``csrc/jit_loader_autograd.cpp``, full ATen and
    autograd headers) compiled once per exact torch build and compiler: the path of its
    library, or None where the compiler refused it. With ``now`` false a missing piece
    raises :class:`shared.Missing`."""
    cxx = toolchain.unwrap(toolchain.cxx_compiler())
    flags, ldflags = autograd_command(cxx)
    kind = "autograd" + hashlib.sha256(AUTOGRAD_SOURCE.read_bytes()).hexdigest()
    folder = CacheStore(root).shared_folder() / f"autograd-{shared.piece_key(kind, cxx, flags + ldflags, '')}"

    def make(tmp: Path):
        return shared.run([cxx, *flags, "-shared", str(AUTOGRAD_SOURCE), "-o",
                           str(tmp / AUTOGRAD_LIBRARY), *ldflags], tmp)

    built = shared.build_piece(folder, make, now)
    return built / AUTOGRAD_LIBRARY if built else None


def build_autograd_later(root: Path):
    """Build the C++ autograd piece in a detached background process at low priority
    (an op's first build never waits for it; the Python path serves meanwhile); returns
    the process, or None where it could not start."""
    return shared.background(json.dumps({"autograd": str(root)}), __name__)


# The background builds of pieces this process started and has not seen finish: (the
# piece's build function, folder of pieces) -> the builder. A piece loads at its first use
# after its build finished; _ARRIVED counts those builds, so a caller that went without a
# piece can tell, with no file system access, that it is worth asking again.
_BUILDING: dict[tuple[object, str], subprocess.Popen] = {}
_ARRIVED = [0]
WAIT_FOR_PIECE_S = 3600  # a watcher thread stops waiting for a piece's build after this


def pieces_arrived() -> int:
    """How many background builds of process pieces this process started have finished
    (their pieces built or refused): a ``waitpid`` per build still running, no more."""
    for key, proc in list(_BUILDING.items()):
        if proc.poll() is not None:
            del _BUILDING[key]
            _ARRIVED[0] += 1
    return _ARRIVED[0]


def building(build) -> bool:
    """Whether a background build of the piece ``build`` makes (``autograd_piece``,
    ``fastcall_piece``), started by this process, still runs."""
    pieces_arrived()
    return any(b is build for b, _ in _BUILDING)


def process_piece(build, build_later, loaded: dict, started: set, load, what: str,
                  when_built=None):
    """A piece this process uses (the C++ autograd kernel, the fast Python entry), loaded
    once per folder of pieces: ``load(path)`` of the path ``build(root, now=...)`` gives, or
    None where it is missing (then ``build_later(root)`` starts a background build, once per
    process, unless ``JIT_LOADER_SHARED_NOW`` builds it now), was refused by the compiler,
    sits in a cache this process cannot write, or does not load. ``loaded`` and ``started``
    are the caller's: one per piece. ``what`` names the piece and the fallback in messages.
    ``when_built``: called, in a thread of its own, once a background build this call
    started has finished (the piece then loads at its next use)."""
    from jit_tools import store as stores  # the cache of this process, as the load path sees it
    root = stores.current().root
    key = str(CacheStore(root).shared_folder())
    if key in loaded:
        return loaded[key]
    try:
        path = build(root, now=shared.build_now())
    except shared.Missing:
        if key not in started:
            started.add(key)
            proc = build_later(root)
            if proc is not None:
                _BUILDING[(build, key)] = proc
                if when_built is not None:
                    _watch(proc, when_built)
        return None
    except OSError as e:
        logger.info("%s is not available (%s)", what, e)
        loaded[key] = None
        return None
    obj = None
    if path is not None:
        try:
            obj = load(path)
        except (ImportError, OSError, AttributeError) as e:
            logger.info("%s: %s could not be loaded (%s)", what, path, e)
    loaded[key] = obj
    return obj


FASTCALL_SOURCE = keys.CSRC / "jit_loader_fastcall.cpp"
FASTCALL_MODULE = "jit_loader_fastcall"


def fastcall_command(cxx: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of the fast Python entry: the autograd piece's, plus
    Python's headers and torch's Python bindings (an extension module of this Python)."""
    flags, ldflags = autograd_command(cxx)
    return ([*flags, f"-isystem{sysconfig.get_paths()['include']}"],
            [*ldflags, "-ltorch_python"])


def fastcall_piece(root: Path, now: bool = True) -> Path | None:
    """The loader's fast Python entry to dispatcher ops (``csrc/jit_loader_fastcall.cpp``),
    an extension module compiled once per exact torch build, Python and compiler: its path,
    or None where the compiler refused it. With ``now`` false a missing piece raises
    :class:`shared.Missing`."""
    cxx = toolchain.unwrap(toolchain.cxx_compiler())
    flags, ldflags = fastcall_command(cxx)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    kind = "fastcall" + sys.version + hashlib.sha256(FASTCALL_SOURCE.read_bytes()).hexdigest()
    folder = CacheStore(root).shared_folder() / f"fastcall-{shared.piece_key(kind, cxx, flags + ldflags, '')}"
    library = FASTCALL_MODULE + suffix

    def make(tmp: Path):
        return shared.run([cxx, *flags, "-shared", str(FASTCALL_SOURCE), "-o", str(tmp / library),
                           *ldflags], tmp)

    built = shared.build_piece(folder, make, now)
    return built / library if built else None


def build_fastcall_later(root: Path):
    """Build the fast Python entry in a detached background process at low priority (the
    ops are called through torch.ops meanwhile); returns the process, or None."""
    return shared.background(json.dumps({"fastcall": str(root)}), __name__)


def _watch(proc: subprocess.Popen, then) -> None:
    """Run ``then()`` in a daemon thread once ``proc`` has exited (at most
    WAIT_FOR_PIECE_S later; a build that takes longer is left to the next use)."""
    import threading

    def wait() -> None:
        try:
            proc.wait(timeout=WAIT_FOR_PIECE_S)
        except subprocess.TimeoutExpired:
            return
        try:
            then()
        except Exception as e:  # noqa: BLE001 - a thread has no caller to raise to
            logger.debug("using a shared piece built in the background failed: %s", e)

    threading.Thread(target=wait, name="jit_loader piece watcher", daemon=True).start()


def _main(argv: list[str]) -> int:
    """``python -m jit_tools.builder.process_pieces SPEC``: the background build of one
    piece, under its own lock."""
    spec = json.loads(argv[0])
    with contextlib.suppress(OSError):
        os.nice(10)
    if "autograd" in spec:
        autograd_piece(Path(spec["autograd"]))
    else:
        fastcall_piece(Path(spec["fastcall"]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
