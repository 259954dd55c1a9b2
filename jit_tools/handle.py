"""The handle ``load`` returns: attribute access always resolves to the newest build."""

from __future__ import annotations

import types
from pathlib import Path

import torch

from jit_tools import pipeline, registry
from jit_tools.state import BuildInfo, OpState


class Op:
    """Handle on a loaded op; attribute access resolves to its newest build.

    ``op.<name>`` looks up the op's Python surface module first (functions,
    ``autograd.Function`` classes, ``nn.Module`` classes), then a pybind11 module it
    defines, then its dispatcher ops ``torch.ops.<namespace>.<name>``.
    """

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

    def reload(self, verbose: bool | None = None) -> bool:
        """Rebuild and reload if any source, header or the Python surface changed."""
        return pipeline.reload(self._state, verbose)

    def __getattr__(self, attr: str):
        state = self._state
        for module in (state.module, state.ext_module):
            if module is not None and hasattr(module, attr):
                return getattr(module, attr)
        for ns in state.namespaces:
            if attr in registry.ops_in(ns):
                return getattr(getattr(torch.ops, ns), attr)
        names = sorted(
            {n for m in (state.module, state.ext_module) if m for n in vars(m) if not n.startswith("_")}
            | {n for ns in state.namespaces for n in registry.ops_in(ns)})
        raise AttributeError(f"op {state.name!r} has no attribute {attr!r}; it has: {', '.join(names)}")

    def __dir__(self):
        state = self._state
        names = set(super().__dir__())
        for m in (state.module, state.ext_module):
            if m is not None:
                names |= {n for n in vars(m) if not n.startswith("_")}
        for ns in state.namespaces:
            names |= set(registry.ops_in(ns))
        return sorted(names)

    def __repr__(self) -> str:
        key = self._state.key or "not built"
        return f"<jit_loader.Op {self.name!r} from {self.path} build {key}>"
