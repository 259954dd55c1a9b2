"""Prebuilt (ahead-of-time) op libraries: what the AOT build compiles, and how
``jit_loader.load_library`` uses a prebuilt library instead of building one.

``deploy/setup.py`` compiles each op folder under ops/ into ``ops/<op>/_C*.so`` with
plain ``TORCH_LIBRARY`` / ``STABLE_TORCH_LIBRARY`` static registration (no loader entry points:
nothing to reload), a stable op with ``-DTORCH_TARGET_VERSION`` as the JIT builds it, and
writes ``ops/<op>/_C.json`` beside it: the digest of the op's files it compiled, its ABI,
the torch it runs with (the exact version for ATen; for a stable op the target version,
and torch's CUDA version when CUDA was built) and whether CUDA was built.
``JIT_LOADER_PREBUILT`` selects:

* unset or ``auto``: the prebuilt library when there is one that runs with this torch
  (ATen: built with it; stable: this torch is at or above the target and has the same
  CUDA major version), from exactly the files the op folder holds now (an installed
  wheel, or an in-place AOT build nobody edited since); otherwise JIT. An edit therefore
  always runs.
* ``1``: always the prebuilt library; an error names the op that has none.
* ``0``: always JIT.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import threading
import types
from pathlib import Path

import torch

from jit_tools import _torch_private, abi as abis, registry, sources as src
from jit_tools.errors import JitLoaderError
from jit_tools.state import PREBUILT_NAMESPACES

ENV = "JIT_LOADER_PREBUILT"
LIBRARY_STEM = "_C"
MANIFEST = LIBRARY_STEM + ".json"

_LOCK = threading.RLock()
_LOADED: dict[Path, "PrebuiltOp"] = {}


# --- what the AOT build compiles (the loader's own rules) -----------------------------


def sources(op_dir: Path, with_cuda: bool) -> list[Path]:
    """Every .cpp/.cc of the op folder; its CUDA sources only when building CUDA."""
    return src.folder_sources(op_dir, with_cuda)


def include_dirs(op_dir: Path) -> list[Path]:
    return [Path(op_dir), Path(op_dir).parent]


def source_digest(op_dir: Path) -> str:
    """Digest of every source and header of the op folder and of the shared ops/common.
    Broader than what an op includes, which errs on the side of rebuilding."""
    op_dir = Path(op_dir).resolve()
    digest = hashlib.sha256()
    common = op_dir.parent / "common"
    for base in (op_dir, common) if common.is_dir() else (op_dir,):
        for path in src.walk(base, src.SOURCE_SUFFIXES + src.HEADER_SUFFIXES):
            digest.update(f"\0{base.name}/{path.relative_to(base)}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def op_abi(op_dir: Path) -> str:
    """The ABI the op's units speak (``abi.STABLE`` or ``abi.ATEN``), as the JIT decides it."""
    op_dir = Path(op_dir)
    return abis.folder_abi(op_dir.name, sources(op_dir, with_cuda=True), include_dirs(op_dir))


def manifest(op_dir: Path, with_cuda: bool) -> dict:
    info = {"op": Path(op_dir).name, "sources": source_digest(op_dir), "abi": op_abi(op_dir),
            "torch": torch.__version__, "with_cuda": with_cuda}
    if info["abi"] == abis.STABLE:
        info.update(torch=abis.TARGET_NAME, target=list(abis.TARGET_VERSION),
                    torch_cuda=torch.version.cuda if with_cuda else None)
    return info


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def runs_with_this_torch(info: dict) -> bool:
    """True when a library described by manifest ``info`` runs with the torch imported."""
    if info.get("abi") != abis.STABLE:
        return info.get("torch") == torch.__version__
    if _release(torch.__version__) < tuple(info.get("target", (99, 0))):
        return False
    cuda = info.get("torch_cuda")
    return cuda is None or (torch.version.cuda or "").split(".")[0] == cuda.split(".")[0]


# --- finding and choosing a prebuilt library ------------------------------------------


def mode() -> str:
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "0", "1"):
        raise ValueError(f"{ENV} must be 0, 1 or auto, got {value!r}")
    return value


def library_path(op_dir: Path) -> Path | None:
    """``<op_dir>/_C.so`` or ``_C.<abi tag>.so``, whichever the AOT build left there."""
    found = sorted(Path(op_dir).glob(LIBRARY_STEM + "*.so"))
    return found[0] if found else None


def _read_manifest(op_dir: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((Path(op_dir) / MANIFEST).read_text())
    return None


def selected(op_dir: Path) -> bool:
    """True when the op's prebuilt library is to be loaded instead of a JIT build."""
    choice = mode()
    if choice == "0":
        return False
    op_dir = Path(op_dir)
    library = library_path(op_dir)
    if choice == "1":
        if library is None:
            raise JitLoaderError(
                f"{ENV}=1 but op {op_dir.name!r} has no prebuilt library in {op_dir}: "
                "install the AOT wheel (pip wheel --no-build-isolation --no-deps ./deploy) "
                "or run `python deploy/setup.py build_ext --inplace`")
        return True
    info = _read_manifest(op_dir)
    return (library is not None and info is not None and runs_with_this_torch(info)
            and info.get("sources") == source_digest(op_dir))


# --- loading ---------------------------------------------------------------------------


def _op_names() -> set[str]:
    return set(_torch_private.dispatcher_op_names())


def load(op_dir: Path, *, surface: bool = False) -> "PrebuiltOp":
    """Load the op's prebuilt library once per process (its static initialisers
    register the ops) and, with ``surface``, import its Python surface."""
    op_dir = Path(op_dir).resolve()
    with _LOCK:
        op = _LOADED.get(op_dir)
        if op is None:
            library = library_path(op_dir)
            before = _op_names()
            torch.ops.load_library(str(library))
            namespaces = sorted({n.split("::", 1)[0] for n in _op_names() - before})
            info = _read_manifest(op_dir) or {}
            stubs = [] if info.get("with_cuda", True) else registry.missing_cuda_kernels(
                namespaces, f"the prebuilt library of op {op_dir.name!r} was built without CUDA")
            op = _LOADED[op_dir] = PrebuiltOp(op_dir, library, namespaces, stubs)
            PREBUILT_NAMESPACES.update(namespaces)
    if surface and op._module is None:
        surface_file = op_dir / f"{op_dir.name}.py"
        if surface_file.is_file():
            op._module = importlib.import_module(
                f"{op_dir.parent.name}.{op_dir.name}.{op_dir.name}")
    return op


class PrebuiltOp:
    """The prebuilt twin of ``jit_loader.Op``: the same attribute lookup (the Python
    surface, then ``torch.ops.<namespace>``); nothing to rebuild or reload."""

    build = None
    extension = None

    def __init__(self, op_dir: Path, library: Path, namespaces: list[str], stubs: list):
        self.path, self.library, self.namespaces = op_dir, str(library), namespaces
        self.name = op_dir.name
        self._module: types.ModuleType | None = None
        self._stubs = stubs

    @property
    def module(self) -> types.ModuleType | None:
        return self._module

    @property
    def ops(self):
        return getattr(torch.ops, self.namespaces[0])

    def reload(self, verbose: bool | None = None) -> bool:
        return False

    def __getattr__(self, attr: str):
        module = self.__dict__.get("_module")
        if module is not None and hasattr(module, attr):
            return getattr(module, attr)
        for ns in self.__dict__.get("namespaces", ()):
            if f"{ns}::{attr}" in _op_names():
                return getattr(getattr(torch.ops, ns), attr)
        raise AttributeError(f"prebuilt op {self.__dict__.get('name')!r} has no attribute {attr!r}")

    def __repr__(self) -> str:
        return f"<jit_tools.prebuilt.PrebuiltOp {self.name!r} from {self.library}>"
