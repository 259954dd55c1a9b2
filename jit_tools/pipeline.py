"""The load pipeline: find, snapshot, key, lock, build or hit, publish, register,
import the surface. ARCHITECTURE.md walks through it step by step.

Functions here take and return :class:`~jit_tools.state.OpState`; the facade
``jit_loader`` wraps them in :class:`~jit_tools.handle.Op` handles.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import time
from pathlib import Path

from jit_tools import (_torch_private, key as keys, layers, locks, registry, sources, store as stores,
                       surface, usage)
from jit_tools.builder import ninja as builder, shared, toolchain
from jit_tools.errors import (BuildError, CacheError, CorruptBuild, JitLoaderError, OpNotFoundError,
                               SourcesChanged)
from jit_tools.log import logger
from jit_tools.state import LOCK, STATES, BuildInfo, OpState, state_for, state_holding
from jit_tools.swap import gate, hotswap


MAX_CHANGED_RETRIES = 3  # builds in a row whose sources changed while they compiled
MAX_VANISHED_RETRIES = 5  # builds removed or replaced between finding and loading them


def _refuse_a_second_folder(state: OpState, namespaces: list[str]) -> None:
    """A clear error, before anything is unregistered, where another op folder's live build
    holds one of these dispatcher namespaces (the dispatcher would refuse the new build with
    a message that names neither folder)."""
    for other in STATES.values():
        taken = sorted(set(other.namespaces) & set(namespaces))
        if other is state or other.cdll is None or not taken:
            continue
        raise JitLoaderError(
            f"op {state.name!r} from {state.op_dir} registers the namespace {taken[0]!r}, which "
            f"the op loaded from {other.op_dir} holds in this process; namespaces are "
            f"process-wide: rename one op (its folder and TORCH_LIBRARY namespace), or load "
            f"the other in another process")


def _activate(state: OpState, store: stores.CacheStore, manifest: dict, key: str) -> None:
    """Make the build ``key`` the live one: withdraw the old registrations, register
    the new ones; on failure put the old build back."""
    so = store.library(state.name, key, manifest)
    try:
        lib = registry.open_library(so)
    except OSError as e:
        if not so.is_file() or os.strerror(errno.ESTALE) in str(e):
            # Removed, or replaced under an NFS client, by another process or host: look again.
            raise locks.Vanished(f"the cached library {so} vanished before it was loaded") from e
        symbol = registry.undefined_symbol(str(e))
        if symbol is not None:
            # The build is intact; its code names something nothing defines. Rebuilding
            # the same sources would fail the same way, so it is reported, not retried.
            sources_list = ", ".join(os.path.basename(p) for p in manifest.get("sources", []))
            raise BuildError(
                f"{state.name}: undefined symbol {symbol}\nop {state.name!r} compiled and linked, "
                f"but loading it failed: its code uses {symbol}, which none of its sources "
                f"({sources_list}) nor torch defines (a declared but undefined function, a "
                f"missing source, or a library to add with extra_ldflags). Full build log: "
                f"{so.parent / 'build.log'}",
                log_path=str(so.parent / "build.log")) from e
        if not store.readonly:
            store.discard(state.name, key)  # truncated or corrupt: the caller rebuilds
        raise CorruptBuild(f"the cached library {so} could not be loaded ({e})") from e
    namespaces = registry.namespaces_of(lib)
    _refuse_a_second_folder(state, namespaces)
    old = state.cdll
    previous_schemas = registry.current_schemas(state.namespaces) if old is not None else {}
    # A live edit's CPU rebuild registers nothing over the new build (swap/gate.py).
    superseded = gate.supersede(state, key)
    if old is not None:
        registry.keepalive(state.namespaces)
        registry.destroy_libraries(state.loader_libs)
        state.loader_libs.clear()
        registry.destroy_module_libraries(state.module)
        registry.unregister(old)
    try:
        try:
            registry.register(lib, state.name, previous_schemas)
        except registry.SchemaChanged as refusal:
            _free_for_new_schemas(state, refusal, list(previous_schemas))
            registry.register(lib, state.name)
    except JitLoaderError:
        if old is not None:
            registry.register(old)
            registry.keepalive(state.namespaces)
            registry.clear_ops_cache(state.namespaces)
            surface.import_surface(state)
            gate.reinstate(state, superseded)
        raise
    state.cdll, state.library, state.key, state.namespaces = lib, str(so), key, namespaces
    gate.replaced(state, superseded)
    registry.keepalive(namespaces)
    registry.clear_ops_cache(namespaces)
    state.publish(surface.handle_attributes(state, state.module))  # the new build's op packets
    if state.held is not None:
        state.held.close()
    with contextlib.suppress(OSError):
        state.held = store.hold(state.name, key)
    if hasattr(lib, f"PyInit_{state.name}"):
        state.ext_module = surface.import_extension(so, state.name, key)
    no_cuda = manifest["config"].get("no_cuda_reason")
    if no_cuda and namespaces:
        fix = ("load it without with_cuda=False (and JIT_LOADER_CUDA unset) to build them"
               if manifest["config"].get("cpu_only") else "reload after fixing that to get them")
        state.loader_libs += registry.missing_cuda_kernels(
            namespaces, f"op {state.name!r} was built without its CUDA sources because "
                        f"{no_cuda}; {fix}.")


def _free_for_new_schemas(state: OpState, refusal: JitLoaderError, qualnames: list[str]) -> None:
    """A new build declares an operator with another schema than the live one: free the
    old operator entries (the dispatcher keeps a kernel's C++ signature for an entry's
    whole life, so only a new entry takes the new signature). Refused, with the reason,
    when something outside the loader's reach holds them."""
    scripted = _torch_private.torchscript_users(qualnames)
    if scripted:
        raise JitLoaderError(
            f"{str(refusal).splitlines()[0]} TorchScript code compiled against the old schema "
            f"({', '.join(scripted)}) holds the operator, and TorchScript cannot let go of it: "
            "restart Python (in Jupyter, restart the kernel) to use the new build; the previous "
            "build stays loaded.") from refusal
    registry.release(state.namespaces)
    held = registry.holders(qualnames)
    if held:
        raise JitLoaderError(
            f"{str(refusal).splitlines()[0]} Registrations made outside op {state.name!r}'s "
            "sources and Python surface still hold the old operator, so it cannot take the new "
            "schema: destroy them (their torch.library.Library objects) and load again; the "
            "previous build stays loaded.\n" + "\n".join(held)) from refusal


def ensure_current(state: OpState, verbose: bool | None) -> bool:
    """Bring the op's native library up to date. Returns True when it changed."""
    gate.collect(state)
    if state.snapshot and not sources.snapshot_changed(state.snapshot):
        failed = gate.failure(state)  # a live edit's CPU build failed: say so until an edit
        if failed is not None:
            raise failed
        return False
    started = time.perf_counter()
    never = layers.never_compile()
    # The key, the ABI check and a kernel swap read the same sources: each file's includes
    # are found once.
    with sources.one_scan():
        key, config, compiled_sources, inputs = keys.compute_key(
            state.name, state.op_dir, state.options, state.sources)
        snapshot = sources.snapshot(state.op_dir if state.sources is None else None, inputs,
                                    surface_file(state))
        if key == state.key:
            state.snapshot = snapshot
            if state.swapped is None:
                return False
            hotswap.revert(state)  # back to the sources of the live build: its own kernels
            state.swapped = None
            back_to = layers.origin(layers.find_build(state.name, key)[0], state.name, key)
            state.info = dataclasses.replace(state.info, key=key, swapped_over=None, origin=back_to)
            return True
        if state.key is not None and state.info is not None and not never and hotswap.try_swap(
                state, key, config, compiled_sources, inputs):
            # The live library runs kernels of the new sources; its key stays the build's.
            state.swapped, state.snapshot = key, snapshot
            state.info = dataclasses.replace(
                state.info, key=key, compiled=False, seconds=time.perf_counter() - started,
                log_path=None, swapped_over=state.key, origin="swapped")
            return True
    compiled = False
    log_path = None
    corrupt_retries = changed_retries = vanished_retries = 0
    # The inputs as the key saw them, before any wait for the build lock: an edit made
    # while another build holds it is then one the build sees (SourcesChanged).
    hashes = keys.input_hashes(inputs)
    # Held until the build found is held: `clean` never removes it in between.
    with stores.current().loading(state.name):
        while True:
            try:
                store, manifest = layers.find_build(state.name, key, readonly_too=corrupt_retries == 0)
                if manifest is None:
                    store, key, manifest, record = _without_compiling(state, key, never, store)
                if manifest is None:
                    try:
                        manifest, log_path, compiled = _build(
                            state, store, key, config, compiled_sources, hashes, record, verbose)
                    except SourcesChanged as e:
                        # Publish only what the key names: take the sources as they are now.
                        changed_retries += 1
                        if changed_retries > MAX_CHANGED_RETRIES:
                            raise JitLoaderError(
                                f"{e}; the sources kept changing during {changed_retries} builds in a "
                                "row, so nothing was published. Load again once the edits settle.") from e
                        logger.info("%s; building the current sources", e)
                        key, config, compiled_sources, inputs = keys.compute_key(
                            state.name, state.op_dir, state.options, state.sources)
                        hashes = keys.input_hashes(inputs)
                        snapshot = sources.snapshot(state.op_dir if state.sources is None else None,
                                                    inputs, surface_file(state))
                        continue
                _activate(state, store, manifest, key)
                break
            except locks.Vanished as e:
                # Another process (or host) removed or replaced the build between finding
                # and loading it: look again, which finds its replacement or builds one.
                vanished_retries += 1
                if vanished_retries > MAX_VANISHED_RETRIES:
                    raise CacheError(f"{e}, {vanished_retries} times in a row: is another "
                                     "process cleaning this cache?") from e
                logger.debug("%s; looking again", e)
            except CorruptBuild as e:
                corrupt_retries += 1
                if corrupt_retries > 1:
                    raise
                logger.warning("%s; rebuilding", e)
    state.snapshot = snapshot
    state.swapped = None
    if never:
        state.live = None  # no kernel swap without a compile (NVRTC): no texts to keep
    else:
        hotswap.record(state, key, config, compiled_sources, inputs)
    hotswap.track_new_build(state)
    origin = "compiled" if compiled else layers.origin(store, state.name, key)
    usage.record(stores.current(), state.name, key, origin, compiled)
    config = manifest.get("config", config)  # a substitute's (built with another compiler)
    state.info = BuildInfo(
        key=key, library=state.library, compiled=compiled,
        seconds=time.perf_counter() - started, log_path=log_path,
        with_cuda=config["with_cuda"], cuda_arch=config["cuda_arch"],
        no_cuda_reason=config.get("no_cuda_reason"), origin=origin)
    if config.get("no_cuda_reason") and compiled and not config.get("cpu_only"):
        logger.warning("built %r for CPU only: %s", state.name, config["no_cuda_reason"])
    return True


def _build(state: OpState, store: stores.CacheStore, key: str, config: dict, compiled_sources,
           hashes: dict, record: dict | None, verbose: bool | None) -> tuple[dict, str | None, bool]:
    """Build ``key`` under the op's build lock, unless another process built it while this
    one waited: (manifest, log path, whether this process compiled)."""
    with store.build_lock(state.name) as lock_fd:
        manifest = store.manifest(state.name, key)  # another process built it
        if manifest is not None:
            return manifest, None, False
        if surface_file(state) is not None:
            surface.warm_source_lookup()
        manifest, log_path = builder.build(
            store, state.name, state.op_dir, state.options, key, config, compiled_sources,
            toolchain.verbose(verbose), lock_fd, hashes=hashes,
            extra_manifest={"inputs": record, "source_list": state.sources is not None})
        with contextlib.suppress(OSError):
            usage.prune(store, state.name, key)
            shared.prune(store.root)
        bound = usage.max_size()
        if bound is not None:
            usage.shrink_after_build(store, bound, (state.name, key))
        return manifest, log_path, True


def _without_compiling(state: OpState, key: str, never: bool, store: stores.CacheStore):
    """A miss: (store, key, manifest, record of the key wanted). A build that differs from
    the wanted one only in a compiler this machine lacks serves instead (its own store,
    key and manifest); otherwise the manifest is None and the caller compiles, unless
    ``JIT_LOADER_COMPILE=never``, which raises the first difference from what the layers
    hold. The record (what the key names) goes into the manifest of a build."""
    now, record = keys.key_record(state.name, state.op_dir, state.options, state.sources)
    if now != key and not never:  # edited since the key was computed: the build loop sees it
        return store, key, None, None
    found = layers.substitute(state.name, state.op_dir, record, state.options.get("cuda_arch"))
    if found is not None:
        return found[0], found[1], found[2], record
    if never:
        raise layers.never_error(state.name, state.op_dir, now, record)
    return store, key, None, record


def surface_file(state: OpState) -> Path | None:
    """The op's Python surface file; ops built from a source list have none."""
    if state.sources is not None:
        return None
    return sources.surface_path(state.op_dir, state.name)


def refresh(state: OpState, verbose: bool | None) -> bool:
    """Bring the native library and the Python surface up to date; True when either
    changed."""
    surface_path = surface_file(state)
    if surface_path is None and state.sources is None and not state.surface_hint_given:
        state.surface_hint_given = True
        others = sources.other_python_files(state.op_dir)
        if others:
            logger.warning(
                "op folder %s has %s but no %s.py: the loader imports <folder name>.py as the "
                "op's Python surface; rename the file to %s.py to have it loaded",
                state.op_dir, ", ".join(others), state.name, state.name)
    surface_key = str(surface_path) if surface_path else None
    old_surface = state.snapshot.get(surface_key) if surface_key else None
    old_library = state.library
    with _busy(state):
        native_changed = ensure_current(state, verbose)
        surface_changed = surface_key is not None and (
            state.module is None or state.surface_error is not None
            or old_surface != state.snapshot.get(surface_key) or surface.went_without_pieces(state))
        # Kernels swapped into the same library need no new surface.
        if (native_changed and state.library != old_library) or surface_changed:
            surface.import_surface(state)
    return native_changed or surface_changed


@contextlib.contextmanager
def _busy(state: OpState):
    """Mark ``state`` as being loaded (see ``OpState.busy``); re-entry is a no-op."""
    if state.busy:
        yield
        return
    state.busy = True
    try:
        yield
    finally:
        state.busy = False


def load_library(name_or_path, verbose: bool | None = None, **options) -> OpState:
    """The native library of an op, up to date; what an op's Python surface calls first.
    Called from the surface while the loader itself is loading that op, it returns the
    state as it is: the loader is already bringing it up to date."""
    op_dir = sources.resolve_op_dir(name_or_path)
    given = keys.options(**dict(options, debug=False)) or options.get("debug") is not None
    with LOCK:
        # None given: keep those of the current build; a first load takes the defaults
        # (JIT_LOADER_DEBUG's among them).
        opts = keys.options(**options) if given or op_dir not in STATES else None
        state = state_for(op_dir, opts)
        if state.busy:
            return state
        with _busy(state):
            ensure_current(state, verbose)
        return state


def load(name_or_path, verbose: bool | None = None, **options) -> OpState:
    op_dir = sources.resolve_op_dir(name_or_path)
    opts = keys.options(**options)
    with LOCK:
        state = state_for(op_dir, opts)
        refresh(state, verbose)
        return state


def load_sources(name: str, source_files, verbose: bool | None = None, **options) -> OpState:
    """Load the op ``name`` built from an explicit list of source files
    (``torch.utils.cpp_extension.load``'s model)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise ValueError(f"load: name must be a C identifier (it names the module), got {name!r}")
    files = []
    for item in source_files:
        path = Path(item).expanduser().resolve()
        if not path.is_file():
            raise OpNotFoundError(f"load {name!r}: source file {os.fspath(item)!r} does not exist")
        if path.suffix not in sources.SOURCE_SUFFIXES:
            raise JitLoaderError(f"load {name!r}: {path} is not a C++/CUDA source "
                                 f"({', '.join(sources.SOURCE_SUFFIXES)})")
        files.append(path)
    if not files:
        raise ValueError(f"load {name!r}: sources is empty")
    opts = keys.options(**options)
    with LOCK:
        state = state_for(sources.common_folder(files), opts, name=name, sources=tuple(files))
        refresh(state, verbose)
        return state


def reload(state: OpState, verbose: bool | None = None) -> bool:
    with LOCK:
        return refresh(state, verbose)


def reload_changed(verbose: bool | None = None) -> list[str]:
    """Refresh every op this process loaded; names of those reloaded. Raises the first
    error after checking them all (a failed op keeps its previous build)."""
    changed, errors = [], []
    with LOCK:
        for state in list(STATES.values()):
            try:
                if refresh(state, verbose):
                    changed.append(state.name)
            except JitLoaderError as e:
                errors.append(e)
    if errors:
        raise errors[0]
    return changed


def write_inline(name: str, cpp_source: str = "", cuda_source: str = "", *,
                 python_source: str | None = None, first_line: int = 1,
                 source_name: str | None = None) -> Path:
    """Write source text into ``<cache>/_inline/<name>/`` (an op folder), with a
    ``#line`` directive so compiler messages name ``source_name`` and the text's lines.
    Files are rewritten only when their text changed, so Ninja stays incremental."""
    wanted = {}
    for suffix, text in ((".cpp", cpp_source), (".cu", cuda_source)):
        if text:
            label = source_name or f"{name}{suffix}"
            wanted[f"{name}{suffix}"] = f'#line {first_line} "{label}"\n{text}'
    if not wanted:
        raise ValueError("load_inline: give cpp_source or cuda_source")
    if python_source is not None:
        wanted[f"{name}.py"] = python_source
    return write_inline_files(name, wanted)


def write_inline_files(name: str, wanted: dict[str, str]) -> Path:
    """Make ``<cache>/_inline/<name>/`` hold exactly the files ``wanted`` (name -> text)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"load_inline: name must be a C identifier, got {name!r}")
    store = stores.current()
    op_dir = store.inline_folder(name)
    try:
        op_dir.mkdir(parents=True, exist_ok=True)
        for existing in op_dir.iterdir():
            if existing.is_file() and existing.name not in wanted:
                existing.unlink()
        for fname, text in wanted.items():
            path = op_dir / fname
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
    except OSError as e:
        raise store.cache_error(e, f"writing the sources of inline op {name!r}") or CacheError(
            f"cannot write the sources of inline op {name!r} into the cache {store.root} "
            f"({e.strerror}: {e.filename}); set JIT_LOADER_CACHE to a writable folder") from e
    return op_dir


def op_key(name_or_path, **options) -> tuple[str, dict]:
    """The cache key and build configuration ``load`` would use now (builds nothing)."""
    op_dir = sources.resolve_op_dir(name_or_path)
    key, config, _sources, _inputs = keys.compute_key(op_dir.name, op_dir, keys.options(**options))
    return key, config


def current_key(state: OpState) -> str:
    """The key the op's inputs have now (builds nothing)."""
    return keys.compute_key(state.name, state.op_dir, state.options, state.sources)[0]


def build_in_use(entry: str | os.PathLike) -> bool:
    """True when some live process (this one included) holds the build folder."""
    entry = Path(entry)
    _store, name, key = stores.CacheStore.of_build(entry)
    return state_holding(name, key) or stores.CacheStore.in_use(entry)


def cached_builds(name: str, verify: str = "changed") -> list[dict]:
    builds = stores.current().builds(name, verify)
    for b in builds:
        b["in_use"] = b["in_use"] or state_holding(name, Path(b["path"]).name)
    return builds


def remove_build(entry: str | os.PathLike) -> bool:
    entry = Path(entry)
    if build_in_use(entry):
        return False
    store, _name, _key = stores.CacheStore.of_build(entry)
    return store.remove(entry)
