"""Every op in ops/ builds here, its CUDA sources included when nvcc is present.

CI has no GPU: this is where every .cu file is compiled and linked against the
installed torch, so a kernel that no longer compiles fails CI, not the next GPU run.
"""

import pytest
import torch

import jit_loader
from subproc import run_python

OPS = jit_loader.available_ops()
CAN_BUILD_CUDA = jit_loader.why_no_cuda() is None


def test_ops_folder_is_not_empty():
    assert len(OPS) >= 1


@pytest.mark.parametrize("name", OPS)
def test_op_builds_and_registers(name):
    op = jit_loader.load(name)
    assert op.library is not None
    has_cu = any(p.suffix == ".cu" for p in op.path.iterdir())
    assert op.build.with_cuda == (has_cu and CAN_BUILD_CUDA), op.build.no_cuda_reason
    for ns in op.namespaces:
        names = jit_loader.ops_in(ns)
        assert names, f"{name}: namespace {ns} registers no operator"
        for op_name in names:
            qualname = f"{ns}::{op_name}"
            assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU")
            if has_cu and CAN_BUILD_CUDA:
                assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CUDA"), qualname


def test_every_reference_imports_without_building():
    """A notebook or a test imports an op's reference (and its package) without a build:
    neither the loader nor the op's surface is imported along."""
    code = f"""
        import importlib, sys
        for name in {OPS!r}:
            importlib.import_module(f"ops.{{name}}.reference")
        print([m for m in sys.modules if m == "jit_loader" or m in {[f"ops.{n}.{n}" for n in OPS]!r}])
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
