"""The CPU side of a live edit: the host units an edit left stale (CPU loops that include an
edited header, ``jit_tools/swap/edits.py``) are rebuilt in the background, and no CPU call
runs their old code meanwhile.

Before ``load`` returns, a *gate* (a Python kernel, ``torch.library``) is registered at the
CPU key of every operator of the op that has a CPU kernel: the newest kernel of a key is
the one the dispatcher runs. A call that reaches it waits for the background build (a
progress bar says so), then calls the operator again at the CPU key. By then the
background thread has registered the new build's CPU kernel blocks over the gate
(:func:`activate`, ``jit_loader_register_impls``): the live library keeps its schemas, its
CUDA kernels (swapped with NVRTC) and every other registration, so nothing is ever left
without a kernel and nothing registered is destroyed while a call may run it. A build
that fails makes the gate raise its ``BuildError``; the CUDA kernels stay, and the next
``load`` of unchanged sources raises it too.

Gates are destroyed at a later load, when no gated call is in flight (:func:`collect`);
until then they sit under the newer kernels, unused. A later edit supersedes the running
rebuild (its kernels never register; its waiting calls go on into the newer gate); a full
activation (:func:`supersede`, :func:`replaced`) or a revert to the live build's sources
(:func:`revert`) drops the CPU kernels registered over the live library.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import sys
import threading
import time
import warnings
from pathlib import Path

from jit_tools import _torch_private, registry
from jit_tools.errors import JitLoaderError
from jit_tools.log import logger


@dataclasses.dataclass(eq=False)
class Rebuild:
    """One background build of an edit's stale host units, and the gates waiting for it."""
    op: str
    key: str
    units: tuple[str, ...]
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    error: BaseException | None = None
    superseded: bool = False
    skipped: bool = False  # the background thread found it superseded: registered nothing
    thread: threading.Thread | None = None
    gates: list = dataclasses.field(default_factory=list)  # torch.library.Library objects


@dataclasses.dataclass(eq=False)
class CpuSide:
    """An op's CPU side while edits are live (``OpState.cpu_side``)."""
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    rebuild: Rebuild | None = None                      # the newest
    earlier: list = dataclasses.field(default_factory=list)  # superseded, gates registered
    overlay: tuple | None = None   # (library, held manifest, key, path): CPU kernels over the live build
    calls: int = 0                 # gated calls in flight


def side(state) -> CpuSide:
    if state.cpu_side is None:
        state.cpu_side = CpuSide()
    return state.cpu_side


# ---- the load path (the caller holds the loader's lock) ---------------------------------------

def start(state, key: str, units) -> Rebuild:
    """Gate every CPU kernel of the op until the background build of ``key`` is registered;
    returns the rebuild for the background thread (:func:`activate`, :func:`finish`)."""
    s = side(state)
    rebuild = Rebuild(state.name, key, tuple(u.name for u in units))
    with s.lock:  # from here on the previous rebuild registers nothing over the new gate
        previous, s.rebuild = s.rebuild, rebuild
        if previous is not None:
            previous.superseded = True
            s.earlier.append(previous)
    try:
        rebuild.gates = _register_gates(state, s, rebuild)
    finally:
        if previous is not None:
            previous.done.set()  # its waiting calls go on into the newer gate
    return rebuild


def _register_gates(state, s: CpuSide, rebuild: Rebuild) -> list:
    import torch

    libs = []
    all_names = _torch_private.dispatcher_op_names()
    for ns in state.namespaces:
        lib = torch.library.Library(ns, "IMPL")
        libs.append(lib)
        for op in registry.ops_in(ns, all_names):
            if not _torch_private.has_kernel(f"{ns}::{op}", "CPU"):
                continue
            name, _, overload = op.partition(".")
            target = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
            # A newer gate goes over an older one that still lives (collected later): torch
            # 2.11 refuses a second Python kernel at one key without allow_override.
            with warnings.catch_warnings():  # "overriding a previously registered kernel"
                warnings.simplefilter("ignore")
                lib.impl(op, _gate(s, rebuild, target), "CPU", with_keyset=True, allow_override=True)
    return libs


_ENTERED = threading.local()  # the rebuilds whose gate this thread is inside


def _gate(s: CpuSide, rebuild: Rebuild, target):
    def gate(keyset, *args, **kwargs):
        inside = _ENTERED.__dict__.setdefault("rebuilds", set())
        if id(rebuild) in inside:
            # The call came back to this gate: the kernels over it were withdrawn while it
            # waited (a revert in another thread). Never the old code, never a loop.
            raise JitLoaderError(f"op {rebuild.op!r}: its CPU kernels changed while this call "
                                 "waited for them; call it again")
        inside.add(id(rebuild))
        try:
            return _gated_call(s, rebuild, target, args, kwargs)
        finally:
            inside.discard(id(rebuild))
    return gate


def _gated_call(s: CpuSide, rebuild: Rebuild, target, args, kwargs):
    with _counted(s):
        wait(rebuild)
        if rebuild.error is not None and not rebuild.superseded:
            raise copy.copy(rebuild.error)
        # The newer CPU kernel (the rebuild's, a newer gate's or a new build's) is
        # registered over this gate by now.
        return target.redispatch(_torch_private.cpu_keyset(), *args, **kwargs)


@contextlib.contextmanager
def _counted(s: CpuSide):
    with s.lock:
        s.calls += 1
    try:
        yield
    finally:
        with s.lock:
            s.calls -= 1


def wait(rebuild: Rebuild, timeout: float | None = None) -> None:
    """Wait for ``rebuild`` to be registered, failed or superseded, with a progress bar.
    Bounded: the background thread sets ``done`` when it ends, whatever happens, and
    ``JIT_LOADER_LOCK_TIMEOUT`` (seconds) ends the wait with an error."""
    if rebuild.done.is_set():
        return
    limit = timeout if timeout is not None else _lock_timeout()
    started = time.monotonic()
    bar = None
    try:
        while not rebuild.done.wait(0.1):
            thread = rebuild.thread
            if thread is not None and not thread.is_alive() and not rebuild.done.is_set():
                raise JitLoaderError(f"op {rebuild.op!r}: the background build of its CPU "
                                     "kernels ended without a result; load it again")
            waited = time.monotonic() - started
            if limit is not None and waited > limit:
                raise JitLoaderError(
                    f"op {rebuild.op!r}: its CPU kernels ({', '.join(rebuild.units)}) are still "
                    f"being rebuilt after {limit:g} s (JIT_LOADER_LOCK_TIMEOUT)")
            if bar is None and waited > 0.5:  # a wait worth showing
                bar = _progress(rebuild)
            if bar is not None:
                bar.update(0.1)
    finally:
        if bar is not None:
            bar.close()


def _lock_timeout() -> float | None:
    value = os.environ.get("JIT_LOADER_LOCK_TIMEOUT")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _progress(rebuild: Rebuild):
    with warnings.catch_warnings():  # "IProgress not found" in a notebook without ipywidgets
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm
    return tqdm(desc=f"{rebuild.op}: CPU call waits for {', '.join(rebuild.units)}",
                unit="s", bar_format="{desc} {elapsed}", leave=False, file=sys.stderr,
                mininterval=1.0)


# ---- the background thread ---------------------------------------------------------------

def activate(state, rebuild: Rebuild, library, held=None) -> bool:
    """Register the CPU kernel blocks of ``library`` (a build of ``rebuild.key``, or its CPU
    side linked ahead, ``jit_tools/swap/cpu_link.py``) over the gate, unless a newer edit or
    build superseded ``rebuild``; then the previous such registration goes. ``held``: the
    open manifest whose shared lock keeps ``clean`` from the build. True when registered;
    the caller sets ``rebuild.done`` (:func:`finish`)."""
    s = side(state)
    with s.lock:
        if rebuild.superseded:
            rebuild.skipped = True
            if held is not None:
                held.close()
            return False
        lib = registry.open_library(library)
        registry.register_impls(lib, "CPU", state.name)
        previous, s.overlay = s.overlay, (lib, held, rebuild.key, Path(library))
    if previous is not None:
        _drop(previous)
    return True


def finish(rebuild: Rebuild, error: BaseException | None = None) -> None:
    """The background thread is done with ``rebuild`` (``error``: why it failed; an error
    after its CPU kernels were registered is the full build's alone)."""
    if error is not None and not rebuild.superseded and not rebuild.done.is_set():
        rebuild.error = error
    rebuild.done.set()


def _drop(overlay: tuple) -> None:
    lib, held, _key, path = overlay
    registry.unregister(lib)
    if held is not None:
        held.close()
    if ".cpu-" in path.name:  # linked ahead beside the work folder: nothing else uses it
        with contextlib.suppress(OSError):
            path.unlink()


# ---- later loads -------------------------------------------------------------------------

def failure(state) -> BaseException | None:
    """The error of the op's newest rebuild, while it stands (the next load raises it)."""
    s = getattr(state, "cpu_side", None)
    r = s.rebuild if s is not None else None
    if r is not None and r.done.is_set() and r.error is not None and not r.superseded:
        return copy.copy(r.error)
    return None


def collect(state) -> None:
    """Destroy the gates nothing can reach any more, when no gated call is in flight: those
    of superseded rebuilds, and the newest one's once its kernels are registered over it."""
    s = getattr(state, "cpu_side", None)
    if s is None:
        return
    with s.lock:
        if s.calls:
            return
        gone = list(s.earlier)
        s.earlier.clear()
        r = s.rebuild
        if r is not None and r.done.is_set() and (r.superseded or r.error is None):
            gone.append(r)
            s.rebuild = None
    for r in gone:
        registry.destroy_libraries(r.gates)
        r.gates = []


def supersede(state, key: str | None) -> Rebuild | None:
    """Before a full activation of build ``key``: the running rebuild registers nothing from
    now on, and gates no call is in (all, usually) go now: the new build may change a
    schema, which registrations the loader does not own would block. CPU kernels registered
    from that same build's library go too (its blocks are registered once at a time)."""
    s = getattr(state, "cpu_side", None)
    if s is None:
        return None
    with s.lock:
        r, s.rebuild = s.rebuild, None
        if r is not None:
            r.superseded = True
            s.earlier.append(r)
        same = s.overlay if s.overlay is not None and s.overlay[2] == key else None
        if same is not None:
            s.overlay = None
    if same is not None:
        _drop(same)
    collect(state)
    return r


def replaced(state, superseded: Rebuild | None) -> None:
    """After a full activation registered a new build over everything: the CPU kernels
    registered over the old live library go, waiting calls go on into the new build."""
    s = getattr(state, "cpu_side", None)
    if s is None:
        return
    with s.lock:
        overlay, s.overlay = s.overlay, None
    if overlay is not None:
        _drop(overlay)
    if superseded is not None:
        superseded.done.set()
    collect(state)


def reinstate(state, superseded: Rebuild | None) -> None:
    """A full activation failed and the old library is registered again, over what a live
    edit had registered for the CPU: put that back on top, and the gate of the rebuild the
    activation superseded, so no CPU call runs code older than the last load saw."""
    s = getattr(state, "cpu_side", None)
    if s is None:
        return
    with s.lock:
        if s.overlay is not None:
            registry.unregister(s.overlay[0])
            registry.register_impls(s.overlay[0], "CPU", state.name)
        if superseded is None or s.rebuild is not None:
            return
        superseded.superseded = False
        with contextlib.suppress(ValueError):
            s.earlier.remove(superseded)
        s.rebuild = superseded
        superseded.gates += _register_gates(state, s, superseded)
        catch_up = superseded.skipped and superseded.error is None
    if catch_up:  # its build finished while superseded: register its CPU kernels now
        from jit_tools import store as stores

        store = stores.current()
        manifest = store.manifest(state.name, superseded.key)
        if manifest is None:
            superseded.error = JitLoaderError(f"op {state.name!r}: build {superseded.key} is gone "
                                              "from the cache; load the op again")
        else:
            superseded.skipped = False
            held = None
            with contextlib.suppress(OSError):
                held = store.hold(state.name, superseded.key)
            activate(state, superseded, store.library(state.name, superseded.key, manifest), held)


def revert(state, wait_s: float = 600.0) -> None:
    """The sources went back to the live build's: its own CPU kernels serve again. A gated
    call in flight (another thread) is let finish first, into the rebuild it waits for: no
    kernel may be withdrawn from under it, and the gate must not be left on top."""
    s = getattr(state, "cpu_side", None)
    if s is None:
        return
    deadline = time.monotonic() + wait_s
    while s.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    if s.calls:
        raise JitLoaderError(
            f"op {state.name!r}: {s.calls} CPU call(s) still wait for the rebuild of an earlier "
            f"edit after {wait_s:g} s; load again once they return")
    r = supersede(state, None)
    replaced(state, r)
