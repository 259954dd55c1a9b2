"""Ahead-of-time build of the bundled ops: one extension per op folder, in a wheel that
imports like the source tree (``import ops.gelu``, ``torch.ops.gelu.forward``) and
compiles nothing at import.

From the repository root (torch must be importable, hence no build isolation):

    pip wheel --no-build-isolation --no-deps ./deploy -w dist     # the wheel
    python deploy/setup.py build_ext --inplace                   # libraries beside the sources

Each op ``ops/<op>`` becomes ``ops/<op>/_C.abi3.so`` from the same sources the JIT
loader compiles (every .cpp/.cc; *_cuda.cpp and .cu only with CUDA), with plain
``TORCH_LIBRARY`` / ``STABLE_TORCH_LIBRARY`` static registration, and ``ops/<op>/_C.json``
records what it was built from (see jit_tools/prebuilt.py). A stable-ABI op is compiled
with ``-DTORCH_TARGET_VERSION`` for torch 2.11 (which also makes any ATen header an
error), so its library loads in every torch from 2.11 on; a wheel of stable ops only
(``OPS="sigmoid gelu resize detection"``) requires ``torch>=2.11`` instead of the torch
that built it. The libraries link libtorch but not libtorch_python, so a C++ program
without Python can load them too.

Environment: ``OPS="gelu sigmoid"`` builds a subset; ``WITH_CUDA=0|1`` (default: 1
when nvcc and a CUDA build of torch are present); ``TORCH_CUDA_ARCH_LIST``; ``MAX_JOBS``; ``AOT_BUILD_DIR`` (default deploy/build).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Build from deploy/: setuptools would otherwise apply the repository's own
# pyproject.toml (the pure-Python project) to this distribution.
os.chdir(HERE)
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from setuptools import find_packages, setup  # noqa: E402

from jit_tools import abi as abis, prebuilt  # noqa: E402
from jit_tools.builder import toolchain  # noqa: E402

# The CUDA toolkit the JIT loader builds with: torch's own guess takes the folder above an
# nvcc wrapper on PATH (/usr/local for /usr/local/bin/nvcc), which has no CUDA headers.
if "CUDA_HOME" not in os.environ and toolchain.cuda_home():
    os.environ["CUDA_HOME"] = toolchain.cuda_home()
from torch.utils import cpp_extension  # noqa: E402

OPS_DIR = ROOT / "ops"
CXX_FLAGS = ["-O3", "-fopenmp"]
NVCC_FLAGS = ["-O3", "-lineinfo"]
# Link the C++ runtime torch uses by its soname (as the JIT loader does): a static
# libstdc++ fallback inside an op breaks iostreams shared with torch.
LINK_FLAGS = ["-fopenmp", "-l:libstdc++.so.6"]


def _with_cuda() -> bool:
    flag = os.environ.get("WITH_CUDA")
    if flag is not None:
        return flag == "1"
    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def _op_dirs() -> list[Path]:
    wanted = os.environ.get("OPS", "").split()
    found = [p for p in sorted(OPS_DIR.iterdir())
             if p.is_dir() and p.name != "common" and not p.name.startswith((".", "_"))
             and prebuilt.sources(p, with_cuda=False)]
    unknown = set(wanted) - {p.name for p in found}
    if unknown:
        raise SystemExit(f"OPS names unknown ops {sorted(unknown)}; ops: {[p.name for p in found]}")
    return [p for p in found if not wanted or p.name in wanted]


def _pip_cuda_includes() -> list[str]:
    """Headers of the CUDA libraries pip installed with torch, for a toolkit that has
    nvcc but not the library headers ATen's CUDA headers include (as the JIT loader)."""
    home = cpp_extension.CUDA_HOME
    if home and (Path(home) / "include" / "cusparse.h").is_file():
        return []
    for base in map(Path, sys.path):
        found = sorted(str(p) for p in (base / "nvidia").glob("*/include") if p.is_dir())
        if found:
            return [flag for inc in found for flag in ("-isystem", inc)]
    return []


def _extension(op_dir: Path, with_cuda: bool):
    kind = cpp_extension.CUDAExtension if with_cuda else cpp_extension.CppExtension
    extra = _pip_cuda_includes() if with_cuda else []
    if prebuilt.op_abi(op_dir) == abis.STABLE:
        extra = [abis.TARGET_FLAG, *extra]
    args = {"cxx": CXX_FLAGS + extra, "nvcc": NVCC_FLAGS + extra} if with_cuda else {"cxx": CXX_FLAGS + extra}
    return kind(
        name=f"ops.{op_dir.name}.{prebuilt.LIBRARY_STEM}",
        sources=[str(p) for p in prebuilt.sources(op_dir, with_cuda)],
        include_dirs=[str(p) for p in prebuilt.include_dirs(op_dir)],
        extra_compile_args=args,
        extra_link_args=LINK_FLAGS,
        py_limited_api=True,  # no Python API used: no libtorch_python, loadable from C++
    )


class BuildOps(cpp_extension.BuildExtension):
    """Builds the op libraries and writes each one's manifest beside it."""

    def build_extensions(self):
        # setuptools names every object <stem>.o, so an op's <op>_cuda.cpp (host side) and
        # <op>_cuda.cu (kernels) would both compile to <op>_cuda.o; name a CUDA object
        # <stem>.cuda.o, as torch's JIT builds do.
        names, ext = self.compiler.object_filenames, self.compiler.obj_extension

        def object_filenames(sources, strip_dir=0, output_dir=""):
            objects = names(sources, strip_dir, output_dir)
            return [o[:-len(ext)] + ".cuda" + ext if s.endswith(".cu") else o
                    for s, o in zip(sources, objects)]

        self.compiler.object_filenames = object_filenames
        super().build_extensions()

    def build_extension(self, ext):
        super().build_extension(ext)
        _write_manifest(ext, Path(self.get_ext_fullpath(ext.name)).parent)

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()  # --inplace: the libraries go beside the sources
        for ext in self.extensions:
            _write_manifest(ext, OPS_DIR / ext.name.split(".")[1])


def _write_manifest(ext, folder: Path) -> None:
    op_dir = OPS_DIR / ext.name.split(".")[1]
    (folder / prebuilt.MANIFEST).write_text(
        json.dumps(prebuilt.manifest(op_dir, WITH_CUDA), indent=1) + "\n")


WITH_CUDA = _with_cuda()
BUILD_DIR = os.environ.get("AOT_BUILD_DIR", "build")  # relative to deploy/
os.makedirs(BUILD_DIR, exist_ok=True)
torch_version = torch.__version__.split("+")[0]
variant = f"cu{torch.version.cuda.replace('.', '')}" if WITH_CUDA else "cpu"
OP_DIRS = _op_dirs()
# Stable ops only: the wheel runs with every torch from the target version on.
ALL_STABLE = all(prebuilt.op_abi(p) == abis.STABLE for p in OP_DIRS)
target = "{}.{}".format(*abis.TARGET_VERSION)

setup(
    name="jit-ops-toolkit",
    # The local label names the torch the libraries were compiled against (C++ ABI), or
    # the oldest torch a wheel of stable ops runs with.
    version=f"0.1.0+stable{target}.{variant}" if ALL_STABLE else f"0.1.0+torch{torch_version}.{variant}",
    description="Prebuilt custom PyTorch operators (LLTM, sigmoid, GELU, resize, detection, scatter) and their loader",
    python_requires=">=3.10",
    install_requires=[f"torch>={target}" if ALL_STABLE else f"torch=={torch_version}"],
    py_modules=["jit_loader"],
    package_dir={"": ".."},
    packages=find_packages(str(ROOT), include=["ops", "ops.*", "jit_tools", "jit_tools.*"]),
    # The sources ship too: they document the ops, JIT_LOADER_PREBUILT=0 rebuilds them,
    # and the prebuilt manifest's digest is checked against them.
    package_data={"": ["*.cpp", "*.cc", "*.cu", "*.h", "*.cuh"], "ops": ["common/*"],
                  "jit_tools": ["csrc/*"], "jit_tools.tools": ["templates/*.tmpl", "templates/*/*.tmpl"]},
    ext_modules=[_extension(p, WITH_CUDA) for p in OP_DIRS],
    cmdclass={"build_ext": BuildOps.with_options(use_ninja=True)},
    # The libraries use no Python API (py_limited_api above): one wheel serves every
    # CPython from 3.10 on, so a wheel built with one Python installs under another.
    options={"egg_info": {"egg_base": BUILD_DIR}, "build": {"build_base": BUILD_DIR},
             "bdist_wheel": {"py_limited_api": "cp310"}},
    zip_safe=False,
)
