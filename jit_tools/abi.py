"""Which of torch's two C++ ABIs an op's units speak, and what each needs to build.

ATen (``ATen/ATen.h``, ``torch/library.h``, ``TORCH_LIBRARY``): the full API, C++
autograd; a library runs only with the torch it was built against. The LibTorch
stable ABI (``torch/csrc/stable/*``, ``torch/headeronly/*``, ``STABLE_TORCH_LIBRARY``):
a C shim and header-only C++, so a unit compiles without ATen's headers and the
library loads in every torch at or above the version it targets
(``TORCH_TARGET_VERSION``).

A unit is stable when it, or a local header it includes, includes
``torch/csrc/stable/`` or opens a ``STABLE_TORCH_LIBRARY*`` block; ATen when it includes
ATen, c10 or torch's C++ API headers or opens a ``TORCH_LIBRARY*`` block; neither
(torch-free ``.cu`` kernels, plain C++) goes with the rest of its folder. One op folder
builds against one ABI: each has its own force-included registry header.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterable, Sequence

from jit_tools import sources
from jit_tools.errors import JitLoaderError

ATEN, STABLE = "aten", "stable"

# The oldest torch a stable build must load in (the GPU image's): only what that
# release's stable ABI offers compiles. torch/csrc/stable/version.h reads the macro.
TARGET_VERSION = (2, 11)
TARGET_FLAG = "-DTORCH_TARGET_VERSION=0x{:02x}{:02x}000000000000".format(*TARGET_VERSION)
TARGET_NAME = "stable>={}.{}".format(*TARGET_VERSION)

CSRC = Path(__file__).resolve().parent / "csrc"
STABLE_REGISTRY_HEADER = CSRC / "jit_loader_stable_registry.h"
STABLE_SUPPORT_HASH = hashlib.sha256(STABLE_REGISTRY_HEADER.read_bytes()
                                     + (CSRC / "jit_loader_registry_core.h").read_bytes()).hexdigest()[:16]

# The header set a stable unit uses, precompiled once per toolchain (jit_tools/builder/speedups.py).
STABLE_PCH_TEXT = (
    "// The stable ABI header set the ops' C++ units use, precompiled once.\n#pragma once\n"
    "#include <torch/csrc/stable/library.h>\n#include <torch/csrc/stable/tensor.h>\n"
    "#include <torch/csrc/stable/ops.h>\n#include <torch/csrc/stable/accelerator.h>\n"
    "#include <torch/headeronly/core/ScalarType.h>\n#include <torch/headeronly/core/Dispatch_v2.h>\n")

_STABLE_MARKS = re.compile(
    rb'^[ \t]*(?:#[ \t]*include[ \t]*[<"](?P<inc>torch/csrc/stable/[^>"]+)[>"]'
    rb'|(?P<reg>STABLE_TORCH_LIBRARY\w*)[ \t]*\()', re.MULTILINE)
_ATEN_MARKS = re.compile(
    rb'^[ \t]*(?:#[ \t]*include[ \t]*[<"](?P<inc>(?:ATen|c10|torch/csrc/api|torch/csrc/autograd)/[^>"]+'
    rb'|torch/(?:library|extension|torch|all|script|types|python)\.h)[>"]'
    rb'|(?P<reg>TORCH_LIBRARY\w*)[ \t]*\()', re.MULTILINE)


def _first_mark(pattern: re.Pattern, files: Iterable[Path]) -> tuple[Path, int, str] | None:
    """(file, line, what) of the first match of ``pattern`` in ``files``."""
    for path in files:
        try:
            text = path.read_bytes()
        except OSError:
            continue
        m = pattern.search(text)
        if m:
            what = (m.group("inc") or m.group("reg")).decode(errors="replace")
            return path, text.count(b"\n", 0, m.start()) + 1, what
    return None


def unit_marks(source: Path, include_dirs: Sequence[Path]) -> dict[str, tuple[Path, int, str]]:
    """What ties one unit to each ABI: ``{abi: (file, line, header or macro)}``, looking
    through the unit and the local headers it includes."""
    files = [source, *sources.local_headers([source], include_dirs)]
    marks = {}
    for abi, pattern in ((STABLE, _STABLE_MARKS), (ATEN, _ATEN_MARKS)):
        found = _first_mark(pattern, files)
        if found is not None:
            marks[abi] = found
    return marks


def _where(mark: tuple[Path, int, str]) -> str:
    return f"{mark[0]}:{mark[1]} ({mark[2]})"


def folder_abi(name: str, units: Sequence[Path], include_dirs: Sequence[Path]) -> str:
    """The ABI an op's units build against; a JitLoaderError in one line when they mix."""
    seen: dict[str, tuple[Path, int, str]] = {}
    for unit in units:
        marks = unit_marks(unit, include_dirs)
        if len(marks) == 2:
            raise JitLoaderError(
                f"op {name!r}: {unit} uses both the stable ABI, {_where(marks[STABLE])}, and "
                f"ATen, {_where(marks[ATEN])}; a unit builds against one of them")
        for abi, mark in marks.items():
            seen.setdefault(abi, mark)
    if len(seen) == 2:
        raise JitLoaderError(
            f"op {name!r} mixes ABIs: {_where(seen[STABLE])} is stable ABI, {_where(seen[ATEN])} "
            f"is ATen; an op folder builds against one of them, so move one kind into an op "
            f"folder of its own")
    return STABLE if STABLE in seen else ATEN


def is_stable_text(text: str) -> bool:
    """True when source text (a ``load_inline`` source) speaks the stable ABI."""
    return _STABLE_MARKS.search(text.encode()) is not None
