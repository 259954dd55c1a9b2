"""The handles ``load`` returns: attribute access always resolves to the newest build.

:class:`Op` for op folders; :class:`ExtensionModule`, a module, for ops loaded the
``torch.utils.cpp_extension`` way. Functions of a ``PYBIND11_MODULE`` are handed out
as small forwarders that look the function up in the newest build at each call, so a
function taken before a reload runs the new code. pybind11 classes, and objects made
from them, stay those of the build that made them.
"""

from __future__ import annotations

import types
from pathlib import Path

import torch

from jit_tools import key as keys, pipeline, prebuilt, registry, sources
from jit_tools.builder import toolchain
from jit_tools.errors import JitLoaderError
from jit_tools.state import BuildInfo, OpState
from jit_tools.surface import newest as _newest


def load_folder(name_or_path, verbose: bool | None = None, *, with_cuda: bool | None = None,
                debug: bool | None = None, **flags) -> "Op | prebuilt.PrebuiltOp":
    """``jit_loader.load`` of an op folder (``flags``: ``extra_cflags`` and the other build
    options of ``key.options``): the prebuilt library where ``JIT_LOADER_PREBUILT`` selects
    it, else the JIT build."""
    op_dir = sources.resolve_op_dir(name_or_path)
    if with_cuda and toolchain.why_no_cuda():
        raise JitLoaderError(f"load({name_or_path!r}, with_cuda=True), but CUDA cannot be "
                             f"built: {toolchain.why_no_cuda()}")
    cpu_only = with_cuda is False or keys.cpu_only_reason({}) is not None
    release = not (keys.debug_default() if debug is None else debug)  # AOT builds are release builds
    if not cpu_only and release and prebuilt.selected(op_dir):
        return prebuilt.load(op_dir, surface=True)
    return Op(pipeline.load(op_dir, verbose, **flags, debug=debug,
                            with_cuda=False if with_cuda is False else None))


# One handle class per op state (a subclass of Op, OpState.handle_class), which holds each
# public name of the op (surface module, pybind11 module, dispatcher ops) as a class
# attribute: see Op.__getattr__.
class Op:
    """Handle on a loaded op; attribute access resolves to its newest build.

    ``op.<name>`` looks up the op's Python surface module first (functions,
    ``autograd.Function`` classes, ``nn.Module`` classes), then a pybind11 module it
    defines, then its dispatcher ops ``torch.ops.<namespace>.<name>``.
    """

    def __new__(cls, state: OpState):
        if cls is Op:
            if state.handle_class is None:
                state.handle_class = type("Op", (Op,), {"__slots__": (), "__doc__": Op.__doc__})
                state.publish(state.handle_attrs)
            cls = state.handle_class
        return super().__new__(cls)

    def __init__(self, state: OpState):
        object.__setattr__(self, "_state", state)

    @property
    def name(self) -> str:
        return self._state.name

    @property
    def path(self) -> Path:
        return self._state.op_dir

    @property
    def namespaces(self) -> list[str]:
        return list(self._state.namespaces)

    @property
    def ops(self):
        """``torch.ops.<namespace>`` of this op (its first namespace)."""
        if not self._state.namespaces:
            raise AttributeError(f"op {self.name!r} registers no TORCH_LIBRARY namespace")
        return getattr(torch.ops, self._state.namespaces[0])

    @property
    def module(self) -> types.ModuleType | None:
        """The op's Python surface module (``<op>/<op>.py``), newest version."""
        return self._state.module

    @property
    def extension(self) -> types.ModuleType | None:
        """The pybind11 module, for ops built with ``PYBIND11_MODULE``."""
        return self._state.ext_module

    @property
    def library(self) -> str | None:
        return self._state.library

    @property
    def build(self) -> BuildInfo | None:
        return self._state.info

    def current_key(self) -> str:
        """The cache key of the op's sources, headers and flags as they are now (builds
        nothing); differs from ``op.build.key`` when an edit awaits a reload."""
        return pipeline.current_key(self._state)

    def reload(self, verbose: bool | None = None) -> bool:
        """Rebuild and reload if any source, header or the Python surface changed."""
        return pipeline.reload(self._state, verbose)

    def wait_for_background(self, timeout: float | None = None) -> None:
        """Wait for what a load or reload left running in this process: the NVRTC
        precompiled header of the op's ``.cu`` (``JIT_LOADER_NVRTC_WARM=1``) and the Ninja
        build that follows a kernel swap. ``timeout`` in seconds for each."""
        from jit_tools.swap import hotswap

        hotswap.wait_for_warm(self._state, timeout)
        hotswap.wait_for_background(self._state, timeout)

    def __getattr__(self, attr: str):
        # Python calls this only after the normal lookup failed, which costs an exception
        # per access (more than the surface function itself: experiments/profile_call.py
        # times both). So every public name of the op is an attribute of this op's handle
        # class, read without a Python call, which the loader replaces whenever it imports
        # a surface or activates a build (OpState.publish, surface.handle_attributes).
        # torch.compile then traces a class attribute, which it guards by the value, not
        # this method (whose reads of the surface module it would guard by a module it
        # imported once, which no reload updates). What comes here: names assigned to the
        # surface module by hand, private names, and names that do not exist.
        state = self._state
        if state.module is not None and hasattr(state.module, attr):
            cls = type(self)
            # Not while torch.compile traces the call: dynamo cannot trace setting a class
            # attribute (torch 2.11), and the eager calls that follow install it anyway.
            if (attr in vars(state.module) and not attr.startswith("_") and cls is state.handle_class
                    and not hasattr(cls, attr) and not torch.compiler.is_compiling()):
                setattr(cls, attr, staticmethod(vars(state.module)[attr]))
                state.handle_attrs[attr] = vars(state.module)[attr]
            return getattr(state.module, attr)
        if state.ext_module is not None and hasattr(state.ext_module, attr):
            return _newest(state, attr)
        for ns in state.namespaces:
            if attr in registry.ops_in(ns):
                return getattr(getattr(torch.ops, ns), attr)
        names = sorted(
            {n for m in (state.module, state.ext_module) if m for n in vars(m) if not n.startswith("_")}
            | {n for ns in state.namespaces for n in registry.ops_in(ns)})
        raise AttributeError(f"op {state.name!r} has no attribute {attr!r}; it has: {', '.join(names)}")

    def __dir__(self):
        state = self._state
        names = set(dir(Op)) | set(vars(self))  # not the properties of names a reload removed
        for m in (state.module, state.ext_module):
            if m is not None:
                names |= {n for n in vars(m) if not n.startswith("_")}
        for ns in state.namespaces:
            names |= set(registry.ops_in(ns))
        return sorted(names)

    def __repr__(self) -> str:
        key = self._state.key or "not built"
        return f"<jit_loader.Op {self.name!r} from {self.path} build {key}>"


class ExtensionModule(types.ModuleType):
    """The module ``jit_loader.load(name=..., sources=[...])`` returns, like
    ``torch.utils.cpp_extension.load``: the op's ``PYBIND11_MODULE``, always its newest
    build. ``jit_loader.load`` with the same arguments rebuilds what changed."""

    def __init__(self, state: OpState):
        super().__init__(state.name, getattr(state.ext_module, "__doc__", None))
        object.__setattr__(self, "_jit_state", state)

    @property
    def __file__(self) -> str | None:
        return self._jit_state.library

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        state = self._jit_state
        if state.ext_module is None or not hasattr(state.ext_module, attr):
            have = ", ".join(n for n in dir(state.ext_module) if not n.startswith("_"))
            raise AttributeError(f"module {state.name!r} has no attribute {attr!r}; it has: {have}")
        return _newest(state, attr)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._jit_state.ext_module)))

    def __repr__(self) -> str:
        return f"<module {self._jit_state.name!r} from {self._jit_state.library!r} (jit_loader)>"
