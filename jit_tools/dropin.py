"""``torch.utils.cpp_extension.load`` / ``load_inline`` arguments, as jit_loader takes them.

The arguments keep torch's meaning; the ones this toolkit cannot honour raise a
:class:`JitLoaderError` naming them, instead of being ignored.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from jit_tools import abi
from jit_tools.builder import toolchain
from jit_tools.errors import JitLoaderError

# torch's argument -> the value(s) jit_loader accepts, and why others cannot work.
_FIXED = {
    "build_directory": (None, "the build folder is jit_loader's content-addressed cache; set "
                              "JIT_LOADER_CACHE to move it"),
    "is_standalone": (False, "jit_loader builds shared libraries to load, not executables"),
    "with_sycl": (None, "SYCL sources are not supported"),
    "extra_sycl_cflags": (None, "SYCL sources are not supported"),
    "sycl_sources": (None, "SYCL sources are not supported"),
    "use_pch": (False, "torch's precompiled torch/extension.h is not supported"),
}
# Accepted and without effect, as in torch on CUDA and CPU (it concerns ROCm hipify).
_NO_EFFECT = ("keep_intermediates",)


def unsupported(options: dict[str, Any]) -> dict[str, Any]:
    """Raise for torch arguments with values jit_loader cannot honour; return the rest."""
    bad = []
    rest = {}
    for arg, value in options.items():
        if arg in _FIXED:
            allowed, why = _FIXED[arg]
            if value and value != allowed:
                bad.append(f"{arg}={value!r} ({why})")
        elif arg not in _NO_EFFECT:
            rest[arg] = value
    if bad:
        raise JitLoaderError("jit_loader does not support these torch.utils.cpp_extension "
                             "arguments: " + "; ".join(bad))
    return rest


def flags(value) -> list[str]:
    """Compiler or linker flags as torch takes them (a list), or one string of flags."""
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def paths(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(v) for v in value]


def check_with_cuda(with_cuda: bool | None, source_files: list[Path]) -> bool | None:
    """torch's ``with_cuda``: None decides from the sources (CUDA when there is a ``.cu``),
    True also builds C++-only sources with CUDA's include paths and libraries (host code
    calling the CUDA runtime). Returns the ``with_cuda`` build option: True only where
    it adds to what the sources decide."""
    if with_cuda is None:
        return None
    has_cu = any(p.suffix == ".cu" for p in source_files)
    if with_cuda and toolchain.why_no_cuda():
        raise JitLoaderError(f"with_cuda=True, but CUDA cannot be built: {toolchain.why_no_cuda()}")
    if not with_cuda and has_cu:
        raise JitLoaderError("with_cuda=False with .cu sources is not supported: leave the .cu "
                             "files out of sources instead")
    return True if with_cuda and not has_cu else None


def inline_sources(cpp_sources, cuda_sources=None, functions=None, *,
                   with_pytorch_error_handling: bool = True,
                   no_implicit_headers: bool = False) -> dict[str, str]:
    """The files torch's ``load_inline`` writes (``main.cpp``, ``cuda.cu``), same text."""
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources or [])
    cuda = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    # Stable ABI text gets no ATen header: torch/extension.h would make its unit ATen's
    # (one ABI per op) and cost it ATen's compile time.
    stable = any(abi.is_stable_text(text) for text in cpp)
    if stable and functions is not None:
        raise JitLoaderError("load_inline: functions= binds with pybind11 through "
                             "torch/extension.h, which stable ABI sources cannot include; "
                             "register the functions with STABLE_TORCH_LIBRARY and call them "
                             "as torch.ops.<namespace>.<name>")
    if not no_implicit_headers and not stable:
        cpp.insert(0, "#include <torch/extension.h>")
    if functions is not None:
        if isinstance(functions, str):
            functions = [functions]
        if isinstance(functions, list):
            functions = {f: f for f in functions}
        elif not isinstance(functions, dict):
            raise ValueError(f"Expected 'functions' to be a list or dict, but was {type(functions)}")
        module_def = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
        for function_name, docstring in functions.items():
            bound = (f"torch::wrap_pybind_function({function_name})" if with_pytorch_error_handling
                     else function_name)
            module_def.append(f'm.def("{function_name}", {bound}, "{docstring}");')
        module_def.append("}")
        cpp += module_def
    files = {"main.cpp": "\n".join(cpp)}
    if cuda:
        if not no_implicit_headers:
            cuda[:0] = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
        files["cuda.cu"] = "\n".join(cuda)
    return files
