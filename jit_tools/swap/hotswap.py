"""Which edits the load path swaps in with NVRTC instead of building, and the swap itself.

An edit is *device-only* when the live build's host code could not tell it happened:
every changed file is a ``.cu`` or a header that no host source (``.cpp``) includes, and
each changed file reads the same once the bodies of its ``__global__`` functions and its
``__device__``-only functions are left out (:func:`host_view`). What is left is what host
code sees: launchers, the ``#if !defined(__CUDACC_RTC__)`` blocks, kernel signatures,
constants and types shared with the launchers, macros. Such an edit of an op whose live
build has tracked kernels on a visible GPU is compiled with NVRTC and swapped in
(``kernels.swap``); anything else, or a refusal on the way, takes the Ninja build.

After a swap the op runs its build K's library with kernels compiled from the sources of
key K2; the Ninja build of K2 runs in a background thread and is published without being
activated, so a new process (or the AOT wheel) loads a build that matches its sources.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import threading
from pathlib import Path

from jit_tools import key as keys, layers, sources, store as stores
from jit_tools.builder import ninja as builder
from jit_tools.errors import BuildError, JitLoaderError, SourcesChanged
from jit_tools.log import logger
from jit_tools.swap import kernels, nvrtc


@dataclasses.dataclass
class LiveSources:
    """The texts the live build was compiled from: what an edit is compared with."""
    key: str
    config: dict
    texts: dict[Path, bytes]   # every file compiled or included
    host_files: set[Path]      # the non-.cu sources and every header they include


def record(state, key: str, config: dict, compiled: list[Path], inputs: list[Path]) -> None:
    """Keep the texts of build ``key`` in ``state.live`` once it is active. Texts read
    after the key was computed are kept only when they still hash to the key."""
    state.live = None
    if not config.get("with_cuda"):
        return
    include_dirs = sources.include_dirs(state.op_dir, state.options)
    try:
        texts = current_texts(state, compiled)
    except OSError:
        return
    hashes = {p: _sha(t) for p, t in texts.items()}
    if keys.digest(config, state.op_dir, hashes) != key:
        return  # edited meanwhile: the next load builds, and records then
    host = [p for p in compiled if p.suffix not in sources.CUDA_SUFFIXES]
    state.live = LiveSources(key, config, texts,
                             set(host) | set(sources.local_headers(host, include_dirs)))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- what host code sees -------------------------------------------------------------------

_COMMENT_OR_LITERAL = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_DEVICE_WORD = re.compile(r"\b(__global__|__device__)\b")


def _strip_comments(text: str) -> str:
    return _COMMENT_OR_LITERAL.sub(lambda m: " " if m.group(0)[0] == "/" else m.group(0), text)


def _matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def host_view(text: str) -> str:
    """``text`` (C++/CUDA source) as host code sees it: comments out, whitespace
    collapsed, the body of each ``__global__`` function and the whole of each
    ``__device__`` function (not ``__host__ __device__``) left out. Preprocessor lines
    stay as they are. Two texts with the same host view differ in device code only."""
    code = _strip_comments(text)
    out: list[str] = []
    pos = 0          # text before pos is in out
    decl_start = 0   # where the declaration holding the current position began
    i = 0
    while i < len(code):
        c = code[i]
        if c == "#" and not code[code.rfind("\n", 0, i) + 1:i].strip():
            end = i
            while True:  # a directive, with its continuation lines
                end = code.find("\n", end)
                if end < 0 or code[end - 1] != "\\":
                    break
                end += 1
            i = len(code) if end < 0 else end
            decl_start = i
            continue
        if c in ";{}":
            decl_start = i + 1
            i += 1
            continue
        m = _DEVICE_WORD.match(code, i)
        if m is None or (i > 0 and (code[i - 1].isalnum() or code[i - 1] == "_")):
            i += 1
            continue
        # A function definition: parentheses, then "{" at depth 0, no "=" before it.
        j, depth, saw_paren = m.end(), 0, False
        while j < len(code):
            if code[j] == "(":
                depth, saw_paren = depth + 1, True
            elif code[j] == ")":
                depth -= 1
            elif depth == 0 and code[j] in ";={":
                break
            j += 1
        if j >= len(code) or code[j] != "{" or not saw_paren:
            i = m.end()
            continue
        close = _matching_brace(code, j)
        head = code[decl_start:j]
        if "__host__" in head:
            i = close + 1
            decl_start = i
            continue
        if m.group(1) == "__global__":  # the launchers name it: its signature stays
            out.append(code[pos:j] + "{ <device code> }")
        else:
            # The function begins on the line of __device__, or at the template header just
            # above it; text before that since the last ";{}" (e.g. a macro invocation
            # without a semicolon) is host code.
            start = code.rfind("\n", 0, m.start()) + 1
            above = code.rfind("\n", 0, max(start - 1, 0)) + 1
            if start > decl_start and code[above:start].strip().startswith("template"):
                start = above
            start = max(start, decl_start)
            out.append(code[pos:start] + " ")
        pos = i = decl_start = close + 1
    out.append(code[pos:])
    return " ".join("".join(out).split())


def why_not_device_only(live: LiveSources | None, config: dict,
                        texts: dict[Path, bytes]) -> str | None:
    """None when ``texts`` (every file compiled or included, as they are now) differ from
    the live build's in device code only; else why not, in a few words."""
    if live is None:
        return "the live build's sources are not known"
    if config != live.config:
        return "the build configuration changed"
    if set(texts) != set(live.texts):
        return "files were added or removed"
    changed = sorted(p for p in texts if texts[p] != live.texts[p])
    if not changed:
        return "no source changed"
    for p in changed:
        if p in live.host_files:
            return f"{p.name} is host code or included by host code"
        old, new = (t.decode(errors="replace") for t in (live.texts[p], texts[p]))
        if host_view(old) != host_view(new):
            return f"the host code of {p.name} changed"
    return None


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
    """Swap the edit that turned the op's sources into key ``key`` into the live process
    when it touched device code only; False (after a log line saying why) when the
    Ninja build must run. An NVRTC error raises BuildError; the running kernels stay."""
    if not kernels.enabled():
        return False
    try:
        texts = current_texts(state, compiled)
    except OSError:
        return False
    reason = why_not_device_only(state.live, config, texts)
    if reason is None and not gpu_visible():
        reason = "no GPU is visible"
    if reason is None:
        try:
            names = kernels.swap(state, state.options)
        except kernels.SwapRefused as e:
            reason = str(e)
        except BuildError:
            raise
        except JitLoaderError as e:
            logger.warning("op %r: the kernel swap failed (%s); building", state.name, e)
            return False
        else:
            logger.info("op %r: swapped in %d kernel(s) compiled by NVRTC over build %s",
                        state.name, len(names), state.key)
            build_later(state, key, config, compiled, inputs)
            return True
    logger.debug("op %r: building (no kernel swap: %s)", state.name, reason)
    return False


def build_later(state, key: str, config: dict, compiled: list[Path], inputs: list[Path]) -> None:
    """Build and publish ``key`` in a background thread, without activating it."""
    if layers.never_compile():  # JIT_LOADER_COMPILE=never
        return
    hashes = keys.input_hashes(inputs)
    name, op_dir, options = state.name, state.op_dir, dict(state.options)

    def run() -> None:
        store = stores.current()
        try:
            with store.loading(name), store.build_lock(name, quiet=True) as lock_fd:
                if store.manifest(name, key) is None:
                    builder.build(store, name, op_dir, options, key, config, compiled,
                                  False, lock_fd, hashes=hashes, progress=False)
        except SourcesChanged as e:
            logger.debug("background build of %r dropped: %s", name, e)
        except Exception as e:  # noqa: BLE001 - a thread has no caller to raise to
            logger.warning("op %r: the background build of %s failed: %s", name, key,
                           str(e).splitlines()[0] if str(e) else type(e).__name__)

    _start(state, "background", "build", run)


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
