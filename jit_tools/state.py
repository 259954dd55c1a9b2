"""Per-process state: the ops this process loaded and the build each one runs.

The only copy: every entry point (``import jit_loader``, ``python -m jit_loader``, the
Jupyter extension, an op's Python surface) reaches the same dictionaries through
this module.
"""

from __future__ import annotations

import dataclasses
import threading
import types
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class BuildInfo:
    """What the last load of an op did."""
    key: str
    library: str
    compiled: bool          # True when this call ran the compiler
    seconds: float          # wall time of the load (build included)
    log_path: str | None
    with_cuda: bool
    cuda_arch: str | None
    no_cuda_reason: str | None
    # Set when the load swapped kernels compiled by NVRTC into the live build instead of
    # building: the key of the build whose library runs them (``key`` is the sources').
    swapped_over: str | None = None
    # Where the build came from: "compiled", "local cache", "layer <folder>", "bundle <name>
    # (<either of those>)", or "swapped" (kernels swapped in, jit_tools/layers.py).
    origin: str = ""


@dataclasses.dataclass
class OpState:
    name: str
    op_dir: Path
    options: dict
    snapshot: dict = dataclasses.field(default_factory=dict)
    key: str | None = None
    cdll: Any = None
    library: str | None = None
    namespaces: list[str] = dataclasses.field(default_factory=list)
    ext_module: types.ModuleType | None = None
    module: types.ModuleType | None = None
    module_name: str | None = None
    loader_libs: list = dataclasses.field(default_factory=list)
    info: BuildInfo | None = None
    held: Any = None  # open file whose shared flock marks the build as in use
    surface_text: str | None = None  # source of the last surface that imported
    surface_error: BaseException | None = None  # the surface file fails to import
    surface_hint_given: bool = False  # told the user their .py is not named <op>.py
    # Set while the loader activates a build or imports the surface: the surface's own
    # load_library(__file__) must then return at once, or a failing activation would
    # import the surface, which would start the activation again, without end.
    busy: bool = False
    # Explicit source files (cpp_extension-style ``load(name, sources)``); None: every
    # source in op_dir. With a list, op_dir is their common folder and there is no
    # Python surface.
    sources: tuple[Path, ...] | None = None
    # The texts the live build was compiled from (hotswap.LiveSources), kept for builds
    # with CUDA: an edit of device code only is swapped in against them.
    live: Any = None
    # Set while the live build runs kernels swapped in for another key (that key).
    swapped: str | None = None
    # The background Ninja build of the swapped key, while one was started.
    background: Any = None
    # The CPU side of live edits (swap/gate.py: the gates, the rebuild they wait for, the
    # newer CPU kernels registered over the live library); None until the first.
    cpu_side: Any = None
    # The thread making the op's NVRTC precompiled header ahead of a first kernel edit.
    warming: Any = None
    # The class of this op's handles (jit_tools/handle.py) and the names it holds as class
    # attributes (name -> value): set_module replaces them, so handles read the new surface.
    handle_class: Any = None
    handle_attrs: dict = dataclasses.field(default_factory=dict)

    def set_module(self, module: types.ModuleType | None, attributes: dict | None = None) -> None:
        """Make ``module`` the op's current Python surface, and ``attributes`` (name ->
        value) what its handles find as class attributes."""
        self.module = module
        self.publish(attributes or {})

    def publish(self, attributes: dict) -> None:
        """Make the handle class hold ``attributes``, each as a ``staticmethod``, in place
        of the earlier ones; a name of the handle's own (``name``, ``reload``...) stays
        the handle's."""
        old, self.handle_attrs = self.handle_attrs, dict(attributes)
        cls = self.handle_class
        if cls is None:
            return
        for name in old.keys() - attributes.keys():
            if name in vars(cls):
                delattr(cls, name)
        for name, value in attributes.items():
            if any(name in vars(base) for base in cls.__mro__[1:]):
                continue
            held = vars(cls).get(name)
            if not (isinstance(held, staticmethod) and held.__func__ is value):
                setattr(cls, name, staticmethod(value))


# One re-entrant lock serialises loads in this process: an op's Python surface calls
# load_library while load() of the same op runs.
LOCK = threading.RLock()
# The dispatcher namespaces of the prebuilt (ahead-of-time) libraries this process loaded
# (jit_tools/prebuilt.py): no compiler is to run for their ops, so they get neither the
# C++ autograd kernel nor the fast entry, shared pieces the loader compiles.
PREBUILT_NAMESPACES: set[str] = set()
# op folder -> its state; ("sources", name) -> the state of a cpp_extension-style op
STATES: dict[Any, OpState] = {}


def state_for(op_dir: Path, options: dict | None, *, name: str | None = None,
              sources: tuple[Path, ...] | None = None) -> OpState:
    """The state of the op in ``op_dir`` (or of the op ``name`` built from ``sources``),
    created on first use. Options other than those of its current build reset its
    snapshot, so the key is computed again and the flags are never silently those of
    another build; ``options=None`` keeps the current ones (an op's Python surface
    calling ``load_library(__file__)``)."""
    index = op_dir if sources is None else ("sources", name)
    state = STATES.get(index)
    if state is None:
        state = STATES[index] = OpState(name=name or op_dir.name, op_dir=op_dir,
                                        options=options or {}, sources=sources)
    else:
        if sources is not None and sources != state.sources:
            state.sources, state.op_dir = sources, op_dir
            state.snapshot = {}
        if options is not None and options != state.options:
            state.options = options
            state.snapshot = {}  # new flags: recompute the key
    return state


def loaded_states() -> list[OpState]:
    with LOCK:
        return list(STATES.values())


def forget(op_dir: Path) -> None:
    """Drop an op's state (tests that fake a failure start the next load afresh)."""
    with LOCK:
        STATES.pop(op_dir, None)


def state_holding(name: str, key: str) -> bool:
    """True when this process runs build ``key`` of op ``name``."""
    with LOCK:
        return any(s.key == key and s.name == name for s in STATES.values())

# namespace -> torch.library.Library holding one keep-alive kernel per operator
# (registry.keepalive says why).
KEEPALIVE: dict[str, Any] = {}
