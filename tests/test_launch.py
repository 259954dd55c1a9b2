"""ops_common::launch (ops/common/launch.h), the one way an op starts a kernel.

It type-checks the arguments against the kernel's parameters at compile time (nvcc, no
GPU needed), no op and no scaffolded op uses ``<<<>>>``, and on a GPU a launch through it
runs, reports a bad configuration, and is captured by a CUDA graph.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

import jit_loader
from jit_tools import sources
from jit_tools.builder import toolchain
from jit_tools.tools import scaffold

HOME = toolchain.cuda_home()
NVCC = os.path.join(HOME, "bin", "nvcc") if HOME else None
needs_nvcc = pytest.mark.skipif(NVCC is None or not os.path.exists(NVCC), reason="needs nvcc")

UNIT = r"""
#include <cuda_runtime.h>
#include "common/launch.h"

__global__ void scale_kernel(float* out, const float* in, long long n, float factor) {}

cudaError_t run(float* out, const float* in, int n, cudaStream_t stream) {
  return ops_common::launch(scale_kernel, 1, 32, 0, stream, %s);
}
"""


def compile_unit(tmp_path: Path, arguments: str) -> subprocess.CompletedProcess:
    unit = tmp_path / "unit.cu"
    unit.write_text(UNIT % arguments)
    return subprocess.run([NVCC, "-std=c++20", "-arch=sm_90", f"-I{sources.OPS_DIR}", "-c",
                           str(unit), "-o", str(tmp_path / "unit.o")],
                          capture_output=True, text=True)


@needs_nvcc
def test_arguments_convert_to_the_parameters_as_with_angle_brackets(tmp_path):
    # int -> long long and double -> float convert, as they would through <<<>>>.
    result = compile_unit(tmp_path, "out, in, n, 2.0")
    assert result.returncode == 0, result.stderr


@needs_nvcc
def test_a_missing_argument_is_a_compile_error(tmp_path):
    result = compile_unit(tmp_path, "out, in, n")
    assert result.returncode != 0
    assert "pass exactly one argument per kernel parameter" in result.stderr


@needs_nvcc
def test_an_argument_of_the_wrong_type_is_a_compile_error(tmp_path):
    result = compile_unit(tmp_path, "in, out, n, 2.0f")  # const float* for float*
    assert result.returncode != 0
    assert "error" in result.stderr


def test_no_op_launches_with_angle_brackets():
    files = [p for p in sources.OPS_DIR.rglob("*")
             if p.suffix in (".cu", ".cuh", ".h") and p.is_file()]
    assert any(p.suffix == ".cu" for p in files)
    offenders = [str(p) for p in files if re.search(r"<<<.*>>>", p.read_text(), re.DOTALL)
                 and not p.name == "launch.h"]
    assert offenders == []


def test_the_scaffold_launches_through_the_helper(tmp_path):
    plan = scaffold.plan("probe_op", tmp_path, cuda=True)
    cu = plan.files[plan.op_dir / "probe_op_cuda.cu"]
    assert "ops_common::launch(" in cu
    assert "<<<" not in cu


@pytest.mark.cuda
def test_a_launch_runs_and_is_captured_by_a_cuda_graph():
    sigmoid = jit_loader.load("sigmoid")
    x = torch.randn(1 << 20, device="cuda")
    expected = torch.sigmoid(x)
    torch.testing.assert_close(sigmoid.sigmoid(x), expected)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.ops.sigmoid.forward(x)  # warm-up outside the capture
        with torch.cuda.graph(graph, stream=stream):
            y = torch.ops.sigmoid.forward(x)
    torch.cuda.current_stream().wait_stream(stream)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.sigmoid(x))
