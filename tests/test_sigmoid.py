"""The sigmoid op, specified as tests: sigmoid(x) = 1 / (1 + e^-x) forward, and the
backward (1 - y) * y * grad from the saved output y, on every device and floating
dtype, for any shape and layout.

Values are compared with the float64 reference in ops/sigmoid/reference.py within
the dtype's tolerance (reference.TOLERANCES: 16-bit results are computed in float
and rounded once).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import jit_loader
from ops.sigmoid import reference

TOLERANCES = reference.TOLERANCES
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SIZES = [0, 1, 3, 1023, 2**20 + 7]
SHAPES = [(), (4, 0, 3), (7, 33), (2, 3, 5, 7)]


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("sigmoid")


def random_input(shape, device, dtype, scale=4.0):
    return (torch.randn(shape, device=device) * scale).to(dtype)


def assert_matches(got, want, dtype):
    assert got.dtype == dtype
    assert got.shape == want.shape
    assert got.is_contiguous()
    torch.testing.assert_close(got.double(), want.double(), **TOLERANCES[dtype])


def layouts(device, dtype):
    """Non-contiguous views, and a storage offset that breaks 16-byte alignment."""
    base = random_input((64, 48), device, dtype)
    return {
        "transposed": base.t(),
        "step_slice": base[:, ::3],
        "storage_offset": base.flatten()[1:],
        "expanded": base[:1].expand(5, 48),
        "channels_last": random_input((2, 3, 5, 7), device, dtype).to(memory_format=torch.channels_last),
    }


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SIZES)
def test_forward_matches_reference(op, device, dtype, size):
    x = random_input(size, device, dtype)
    assert_matches(op.sigmoid(x), reference.sigmoid_reference(x.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_any_shape(op, device, dtype, shape):
    x = random_input(shape, device, dtype)
    assert_matches(op.sigmoid(x), torch.sigmoid(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SIZES)
def test_backward_matches_reference(op, device, dtype, size):
    x = random_input(size, device, dtype).requires_grad_()
    y = op.sigmoid(x)
    grad = random_input(size, device, dtype, scale=1.0)
    y.backward(grad)
    want = reference.sigmoid_backward_reference(grad.double(), y.detach().double())
    assert_matches(x.grad, want, dtype)
    assert_matches(torch.ops.sigmoid.backward(grad, y.detach()), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_matches_aten(op, device, dtype):
    y = torch.sigmoid(random_input(4099, device, dtype))
    grad = random_input(4099, device, dtype, scale=1.0)
    assert_matches(torch.ops.sigmoid.backward(grad, y), torch.ops.aten.sigmoid_backward(grad, y), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["transposed", "step_slice", "storage_offset", "expanded", "channels_last"])
def test_strided_inputs(op, device, dtype, layout):
    x = layouts(device, dtype)[layout]
    before = x.clone()
    y = op.sigmoid(x)
    assert_matches(y, reference.sigmoid_reference(x.double()), dtype)
    assert torch.equal(x, before)
    grad, saved = layouts(device, dtype)[layout], layouts(device, dtype)[layout]
    assert_matches(torch.ops.sigmoid.backward(grad, saved),
                   reference.sigmoid_backward_reference(grad.double(), saved.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_saturates_without_overflow(op, device, dtype):
    """e^-x of a large positive x is never formed: no inf / inf, no NaN."""
    big = torch.finfo(dtype).max
    x = torch.tensor([big, -big, 1e4, -1e4, 100.0, -100.0, 30.0, -30.0, 0.0, -0.0,
                      float("inf"), float("-inf")], device=device, dtype=torch.float64).to(dtype)
    y = op.sigmoid(x)
    assert not y.isnan().any()
    assert_matches(y, reference.sigmoid_reference(x.double()), dtype)
    assert y[0] == 1 and y[1] == 0 and y[-2] == 1 and y[-1] == 0
    assert op.sigmoid(torch.tensor([float("nan")], device=device, dtype=dtype)).isnan().all()


@pytest.mark.cuda
def test_indexing_past_2_31_elements(op):
    """64-bit indices: elements past 2^31 are computed, and the tail after them too."""
    n = 2**31 + 9
    if torch.cuda.mem_get_info()[0] < 3 * n * 2:
        pytest.skip("needs 13 GB of free GPU memory")
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = op.sigmoid(x)
    for part in (slice(0, 4096), slice(2**31 - 4096, n)):
        assert_matches(y[part], reference.sigmoid_reference(x[part].double()), torch.bfloat16)


# ------------------------------------------------------------------- autograd surface


def test_gradcheck(op, device):
    x = random_input((5, 7), device, torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(op.sigmoid, (x,))
    assert torch.autograd.gradcheck(op.SigmoidFunction.apply, (x,))


def test_opcheck(op, device):
    x = random_input((3, 17), device, torch.float32).requires_grad_()
    torch.library.opcheck(torch.ops.sigmoid.forward.default, (x,))
    y = torch.sigmoid(x.detach())
    torch.library.opcheck(torch.ops.sigmoid.backward.default, (torch.randn_like(y), y))


def test_compile_fullgraph(op, device):
    sigmoid = op.sigmoid  # resolve the Op handle outside the traced function

    def f(x):
        return sigmoid(x * 2) + 1

    torch.compiler.reset()
    compiled = torch.compile(f, fullgraph=True)
    x = random_input((8, 33), device, torch.float32).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    y = compiled(x)
    y.sum().backward()
    y_eager = f(x_eager)
    y_eager.sum().backward()
    torch.testing.assert_close(y, y_eager)
    torch.testing.assert_close(x.grad, x_eager.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_module_and_autograd_function(op, device, dtype):
    x = random_input((6, 9), device, dtype).requires_grad_()
    grad = random_input((6, 9), device, dtype, scale=1.0)
    want_y = reference.sigmoid_reference(x.detach().double())
    want_dx = reference.sigmoid_backward_reference(grad.double(), want_y.to(dtype).double())
    for fn in (op.Sigmoid(), op.SigmoidFunction.apply, op.sigmoid):
        x.grad = None
        y = fn(x)
        y.backward(grad)
        assert_matches(y.detach(), want_y, dtype)
        assert_matches(x.grad, want_dx, dtype)


def test_selfcheck(op, device):
    rows = reference.selfcheck(op, device)
    assert rows and all(r["ok"] for r in rows), rows


# ------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("dtype, name", [(torch.int64, "Long"), (torch.bool, "Bool"), (torch.int32, "Int")])
def test_rejects_non_floating_input(op, device, dtype, name):
    x = torch.ones(4, device=device, dtype=dtype)
    with pytest.raises(RuntimeError, match=f"sigmoid.forward: x must be a floating-point tensor, got {name}"):
        torch.ops.sigmoid.forward(x)
    with pytest.raises(RuntimeError, match=f"sigmoid.backward: y must be a floating-point tensor, got {name}"):
        torch.ops.sigmoid.backward(x, x)


def test_backward_rejects_mismatched_grad(op, device):
    y = torch.rand(4, device=device)
    with pytest.raises(RuntimeError, match=r"sigmoid.backward: grad has shape \[3\] but y has shape \[4\]"):
        torch.ops.sigmoid.backward(torch.ones(3, device=device), y)
    with pytest.raises(RuntimeError, match="sigmoid.backward: grad has dtype Double but y has dtype Float"):
        torch.ops.sigmoid.backward(torch.ones(4, device=device, dtype=torch.float64), y)


@pytest.mark.cuda
def test_backward_rejects_mismatched_devices(op):
    y = torch.rand(4, device="cuda")
    with pytest.raises(RuntimeError, match="sigmoid.backward: grad is on cpu but y is on cuda:0"):
        torch.ops.sigmoid.backward(torch.ones(4), y)


def test_reference_import_builds_nothing():
    code = ("import sys, ops.sigmoid, ops.sigmoid.reference; "
            "assert 'jit_loader' not in sys.modules and 'ops.sigmoid.sigmoid' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=jit_loader.REPO_ROOT)
