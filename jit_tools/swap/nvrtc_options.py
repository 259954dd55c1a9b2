"""NVRTC's options from the Ninja build's nvcc flags: the defines, include folders, ``-std``,
``-lineinfo``, fast-math and register choices, translated (:func:`translate_nvcc_flags`);
what only the host compiler, the driver or the arch list reads is left out, and a flag
this module does not know is named, not passed on."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Iterable

from jit_tools.errors import JitLoaderError

# nvcc flags of torch's build.ninja (cpp_extension.COMMON_NVCC_FLAGS) that every .cu
# gets; tests/test_nvrtc.py checks them against a build.ninja torch writes. The C++
# standard is torch's own choice (c++17 in 2.11, c++20 later): see torch_cxx_std.
TORCH_NVCC_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)

_CXX_STD: list[str] = []


def torch_cxx_std() -> str:
    """The ``-std=`` torch's flags give nvcc, as torch composes them for a probe source
    (once per process): NVRTC must compile device code as the Ninja build does, and torch
    hard-codes the standard, which changes between releases."""
    if not _CXX_STD:
        from jit_tools import key as keys
        from jit_tools.builder import ninja_file
        with tempfile.TemporaryDirectory() as tmp:
            cu = Path(tmp) / "probe_cuda.cu"
            cu.write_text("")
            cfg = keys.config("probe", Path(tmp), {}, [cu])
            flags = ninja_file.torch_flags("probe", cfg, [cu], Path(tmp)).cuda_cflags or []
        found = [f for f in flags if f.startswith("-std=")]
        _CXX_STD.append(found[-1] if found else "-std=c++17")
    return _CXX_STD[0]

# nvcc flags that change device code and that NVRTC spells the same way.
_SAME_FLAGS = re.compile(
    r"^(-std=\S+|-lineinfo|--?use_fast_math|--?ftz=\S+|--?prec-div=\S+|--?prec-sqrt=\S+|"
    r"--?fmad=\S+|--?maxrregcount=\d+|-G|--extra-device-vectorization|--?dopt=\S+)$")
# nvcc flags for the host compiler, the driver or the arch list (handled apart): nothing
# NVRTC needs. nvcc's -O sets the host compiler's level only.
_HOST_FLAGS = re.compile(r"^(-O\d?|-fPIC|-g|-c|-MD|-MMD|--?threads=?\d*|-gencode=\S+|"
                         r"-arch=\S+|--?generate-code=\S+|-w|-Xcompiler=\S+|"
                         r"--compiler-options=\S+)$")
_FLAGS_WITH_VALUE = {"-Xcompiler", "--compiler-options", "--threads", "-t", "-MF", "-o",
                     "-gencode", "-arch", "-ccbin", "--compiler-bindir"}


def translate_nvcc_flags(flags: Iterable[str]) -> tuple[list[str], list[str]]:
    """(NVRTC options, flags that have no NVRTC meaning this module knows) for nvcc flags.

    ``--expt-relaxed-constexpr`` (constexpr host functions callable from device code)
    becomes ``-default-device``: NVRTC compiles no host code, and unannotated functions
    (``ops_common::min_of``, ``grid_size``) are device functions there."""
    out: list[str] = []
    unknown: list[str] = []
    items = list(flags)
    i = 0
    while i < len(items):
        flag = items[i]
        i += 1
        if flag in ("-D", "-U", "-I", "-isystem") and i < len(items):
            value = items[i]
            i += 1
            out.append(("-I" if flag in ("-I", "-isystem") else flag) + value)
        elif flag.startswith(("-D", "-U", "-I")):
            out.append(flag)
        elif flag == "--expt-relaxed-constexpr":
            out.append("-default-device")
        elif _SAME_FLAGS.match(flag):
            out.append(flag if flag.startswith("--") or flag in ("-lineinfo", "-G")
                       or flag.startswith("-std=") else "-" + flag)
        elif flag in _FLAGS_WITH_VALUE:
            i += 1
        elif _HOST_FLAGS.match(flag):
            pass
        else:
            unknown.append(flag)
    if "-default-device" not in out:
        out.append("-default-device")
    return out, unknown


def arch_option(arch: str) -> str:
    """NVRTC's --gpu-architecture for one entry of an arch list: ``9.0`` -> ``sm_90``
    (a cubin), ``9.0+PTX`` -> ``compute_90`` (PTX), ``9.0a`` -> ``sm_90a``."""
    text = arch.strip()
    ptx = text.endswith("+PTX")
    text = text.removesuffix("+PTX")
    m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", text)
    if not m:
        raise JitLoaderError(f"CUDA arch {arch!r} is not of the form 9.0, 9.0a or 9.0+PTX")
    return f"--gpu-architecture={'compute' if ptx else 'sm'}_{m.group(1)}{m.group(2)}{m.group(3)}"


def first_arch(arch_list: str) -> str:
    """The arch of a list that NVRTC compiles for when no GPU says otherwise: the newest
    (``8.0;9.0+PTX`` -> ``9.0``, a cubin)."""
    entries = [e.strip() for e in arch_list.replace(",", ";").replace(" ", ";").split(";") if e.strip()]
    if not entries:
        raise JitLoaderError(f"empty CUDA arch list {arch_list!r}")
    return entries[-1].removesuffix("+PTX")
