"""The load path's live edits: an edit of an op's device code and math swapped into the
live process instead of built (``jit_tools/swap/edits.py`` judges which), and the
background build behind it.

A live edit runs like this: NVRTC compiles the kernels the process launched from the
sources as they are now and installs them in the live library (``kernels.swap``); every
other kernel compiles at its first launch; host units that include an edited header (CPU
loops) are rebuilt by the background build, and every CPU call waits for them behind a
gate (``jit_tools/swap/gate.py``). So ``load`` returns at once and no call on any device
runs code older than the sources it saw. The Ninja build of the new key is published
(never activated as a whole), so a new process, or the AOT wheel, loads a build that
matches its sources. Anything the judgement refuses takes the Ninja build in the
foreground, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import threading
from pathlib import Path

from jit_tools import key as keys, layers, sources, store as stores
from jit_tools.builder import ninja as builder
from jit_tools.errors import BuildError, JitLoaderError, SourcesChanged
from jit_tools.log import logger
from jit_tools.swap import cpu_link, edits, gate, kernels, nvrtc


@dataclasses.dataclass
class LiveSources:
    """The texts the live build was compiled from: what an edit is compared with."""
    key: str
    config: dict
    texts: dict[Path, bytes]   # every file compiled or included


def record(state, key: str, config: dict, compiled: list[Path], inputs: list[Path]) -> None:
    """Keep the texts of build ``key`` in ``state.live`` once it is active. Texts read
    after the key was computed are kept only when they still hash to the key."""
    state.live = None
    if not config.get("with_cuda"):
        return
    try:
        texts = current_texts(state, compiled)
    except OSError:
        return
    hashes = {p: _sha(t) for p, t in texts.items()}
    if keys.digest(config, state.op_dir, hashes) != key:
        return  # edited meanwhile: the next load builds, and records then
    state.live = LiveSources(key, config, texts)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def why_not_live(live: LiveSources | None, config: dict, texts: dict[Path, bytes],
                 compiled: list[Path], include_dirs: list[Path]) -> edits.LiveEdit | str:
    """The live edit that turned the live build's sources into ``texts`` (every file
    compiled or included, as they are now), or why it must build, in a few words."""
    if live is None:
        return "the live build's sources are not known"
    if config != live.config:
        return "the build configuration changed"
    return edits.judge(live.texts, texts, compiled, include_dirs)


# ---- the load path's use of it -------------------------------------------------------------

def current_texts(state, compiled: list[Path]) -> dict[Path, bytes]:
    """Every file the op compiles or includes, as it is now."""
    headers = sources.local_headers(compiled, sources.include_dirs(state.op_dir, state.options))
    return {p: p.read_bytes() for p in {*compiled, *headers}}


def gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def track_new_build(state) -> None:
    """Switch kernel tracking on for a build just activated: every op with CUDA kernels (a
    tracked launch costs a lookup in a table of the library's kernels; a process without a
    GPU launches none), so the first kernel edit finds the instantiations in use. Whether a
    GPU is visible is not asked here: that starts CUDA, a fifth of a second, in every
    process that loads an op; a swap asks, and so does an edit session, which makes
    NVRTC's header ahead."""
    if not (kernels.enabled() and state.live is not None):
        return
    try:
        kernels.track(state)
    except kernels.SwapRefused as e:
        logger.debug("%s", e)
        return
    if interactive() and gpu_visible():
        warm_later(state)


_EDIT_SESSION: list[bool] = []


def expect_kernel_edits(on: bool = True) -> None:
    """Declare this process an edit session (the notebook extension does): from now on each
    op with CUDA kernels gets its NVRTC precompiled header made ahead of the first kernel
    edit, ops loaded already included."""
    _EDIT_SESSION[:] = [on]
    if on and kernels.enabled() and gpu_visible():
        from jit_tools.state import loaded_states

        for state in loaded_states():
            if state.live is not None and getattr(state, "warming", None) is None:
                warm_later(state)


def interactive() -> bool:
    """An edit session: the notebook extension said so (:func:`expect_kernel_edits`), or
    JIT_LOADER_NVRTC_WARM=1 (0 turns it off). Other processes run no NVRTC until an edit:
    a new process with unchanged sources compiles nothing."""
    flag = os.environ.get("JIT_LOADER_NVRTC_WARM")
    if flag is not None:
        return flag not in ("0", "false", "False", "")
    return bool(_EDIT_SESSION and _EDIT_SESSION[0])


def warm_later(state) -> None:
    """Make the op's NVRTC precompiled header in a background thread (about a second of
    one core), so that the first kernel edit of the session swaps as fast as later ones."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    name, op_dir, options = state.name, state.op_dir, dict(state.options)

    def run() -> None:
        try:
            nvrtc.warm_for_op(name, op_dir, opts=options, arch=f"{major}.{minor}")
        except Exception as e:  # noqa: BLE001 - a thread has no caller to raise to
            logger.debug("op %r: no NVRTC precompiled header made ahead (%s)", name, e)

    _start(state, "warming", "nvrtc header", run)


def wait_for_warm(state, timeout: float | None = None) -> None:
    """Wait for the op's precompiled header to be made, if that runs."""
    _join(state, "warming", timeout)


def try_swap(state, key: str, config: dict, compiled: list[Path], inputs: list[Path]) -> bool:
    """Take the edit that turned the op's sources into key ``key`` live (module docstring)
    when :func:`why_not_live` allows it; False (after a log line saying why) when the
    Ninja build must run. An NVRTC error raises BuildError; the running kernels stay."""
    if not kernels.enabled():
        return False
    try:
        texts = current_texts(state, compiled)
    except OSError:
        return False
    include_dirs = sources.include_dirs(state.op_dir, state.options)
    verdict = why_not_live(state.live, config, texts, compiled, include_dirs)
    # Without a GPU no kernel of this process can ever run: an edit with stale CPU units is
    # still taken live for its CPU side (the gate); one without builds as before.
    gpu = not isinstance(verdict, str) and gpu_visible()
    if not isinstance(verdict, str) and not gpu and not verdict.stale_units:
        verdict = "no GPU is visible"
    if isinstance(verdict, str):
        logger.debug("op %r: building (no kernel swap: %s)", state.name, verdict)
        return False
    try:
        cu = [p for p in compiled if p.suffix in sources.CUDA_SUFFIXES]
        unit = {*cu, *sources.local_headers(cu, include_dirs)}
        names = kernels.swap(state, state.options, {p: texts[p] for p in unit if p in texts}) \
            if gpu else []
    except kernels.SwapRefused as e:
        logger.debug("op %r: building (no kernel swap: %s)", state.name, e)
        return False
    except BuildError:
        raise
    except JitLoaderError as e:
        logger.warning("op %r: the kernel swap failed (%s); building", state.name, e)
        restore(state)
        return False
    rebuild = None
    if verdict.stale_units:
        try:
            rebuild = gate.start(state, key, verdict.stale_units)
        except Exception as e:  # noqa: BLE001 - no gate, no live edit: build instead
            logger.warning("op %r: the CPU kernels could not be gated (%s); building", state.name, e)
            restore(state)
            return False
    else:  # the CPU code is the live build's again: no earlier edit's CPU kernels over it
        gate.revert(state)
    waits = f"CPU calls wait for {', '.join(rebuild.units)}" if rebuild else ""
    if gpu:
        logger.info("op %r: swapped in %d kernel(s) compiled by NVRTC over build %s%s", state.name,
                    len(names), state.key, f"; {waits}" if waits else "")
    else:
        logger.info("op %r: %s, rebuilt in the background (no GPU, no kernel to swap)",
                    state.name, waits)
    build_later(state, key, config, compiled, inputs, rebuild)
    return True


def build_later(state, key: str, config: dict, compiled: list[Path], inputs: list[Path],
                rebuild: gate.Rebuild | None = None) -> None:
    """Build and publish ``key`` in a background thread, without activating it; with
    ``rebuild``, register its CPU kernels over the gate once published."""
    if layers.never_compile():  # JIT_LOADER_COMPILE=never
        return
    hashes = keys.input_hashes(inputs)
    name, op_dir, options = state.name, state.op_dir, dict(state.options)

    def run() -> None:
        store = stores.current()
        error = None
        try:
            with store.loading(name):
                with store.build_lock(name, quiet=True) as lock_fd:
                    manifest = store.manifest(name, key)
                    if manifest is None:
                        if rebuild is not None:
                            _cpu_ahead(state, rebuild, store, config, hashes, lock_fd)
                        manifest, _log = builder.build(store, name, op_dir, options, key, config,
                                                       compiled, False, lock_fd, hashes=hashes,
                                                       progress=False)
                if rebuild is not None and not rebuild.done.is_set():
                    held = None
                    with contextlib.suppress(OSError):
                        held = store.hold(name, key)
                    gate.activate(state, rebuild, store.library(name, key, manifest), held)
        except SourcesChanged as e:
            logger.debug("background build of %r dropped: %s", name, e)
            error = JitLoaderError(f"op {name!r}: its CPU kernels were not rebuilt: {e}; load "
                                   "the op again")
        except Exception as e:  # noqa: BLE001 - a thread has no caller to raise to
            error = e
            gated = rebuild is not None and not rebuild.done.is_set()
            logger.warning("op %r: the background build of %s failed%s: %s", name, key,
                           "; its CPU calls raise this until the next edit" if gated else "",
                           str(e).splitlines()[0] if str(e) else type(e).__name__)
        finally:
            if rebuild is not None:
                gate.finish(rebuild, error)

    _start(state, "background", "build", run)
    if rebuild is not None:
        rebuild.thread = state.background


def _cpu_ahead(state, rebuild: gate.Rebuild, store, config: dict,
               hashes: dict[str, str], lock_fd: int) -> None:
    """Register the CPU side of ``rebuild`` linked ahead of its full build, when it can be
    (``jit_tools/swap/cpu_link.py``): the CPU calls go on while nvcc compiles."""
    library = cpu_link.link_ahead(store, state.name, state.op_dir, config, hashes, lock_fd)
    if library is None:
        return
    try:
        if gate.activate(state, rebuild, library):
            logger.debug("op %r: CPU calls run the kernels linked ahead", state.name)
            gate.finish(rebuild)
    except (OSError, JitLoaderError) as e:  # e.g. it needs the CUDA objects: the full build
        logger.debug("op %r: CPU kernels linked ahead not used (%s)", state.name, e)
        with contextlib.suppress(OSError):
            library.unlink()


def wait_for_background(state, timeout: float | None = None) -> None:
    """Wait for the op's background build, if one runs."""
    _join(state, "background", timeout)


def _start(state, attr: str, what: str, run) -> None:
    """``run`` in a daemon thread, kept as ``state.<attr>`` for :func:`_join`."""
    thread = threading.Thread(target=run, name=f"jit_loader {what} {state.name}", daemon=True)
    setattr(state, attr, thread)
    thread.start()


def _join(state, attr: str, timeout: float | None) -> None:
    thread = getattr(state, attr, None)
    if thread is not None:
        thread.join(timeout)


def restore(state) -> None:
    """The live build's own kernels again (the sources went back to its key)."""
    with contextlib.suppress(kernels.SwapRefused):
        kernels.track(state, False)
        kernels.track(state, True)


def revert(state) -> None:
    """The sources went back to the live build's key: its own kernels on every device."""
    restore(state)
    gate.revert(state)
