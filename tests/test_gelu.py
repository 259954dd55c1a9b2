"""The gelu op, specified as tests: the sigmoid approximation x * sigmoid(1.702 x)
forward, and the backward grad * (s + 1.702 x s (1 - s)) from the saved input x, on
every device and floating dtype, for any shape and layout.

Values are compared with the float64 reference in ops/gelu/reference.py within the
dtype's tolerance (reference.TOLERANCES: 16-bit results are computed in float
and rounded once).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import jit_loader
from ops.gelu import reference

TOLERANCES = reference.TOLERANCES
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SIZES = [0, 1, 3, 1023, 2**20 + 7]
SHAPES = [(), (4, 0, 3), (7, 33), (2, 3, 5, 7)]


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("gelu")


def random_input(shape, device, dtype, scale=3.0):
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
    assert_matches(op.gelu(x), reference.gelu_reference(x.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_any_shape(op, device, dtype, shape):
    x = random_input(shape, device, dtype)
    assert_matches(op.gelu(x), x * torch.sigmoid(1.702 * x), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SIZES)
def test_backward_matches_reference(op, device, dtype, size):
    x = random_input(size, device, dtype).requires_grad_()
    grad = random_input(size, device, dtype, scale=1.0)
    op.gelu(x).backward(grad)
    want = reference.gelu_backward_reference(grad.double(), x.detach().double())
    assert_matches(x.grad, want, dtype)
    assert_matches(torch.ops.gelu.backward(grad, x.detach()), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_eager_composite(op, device, dtype):
    x = random_input(4099, device, dtype).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    grad = random_input(4099, device, dtype, scale=1.0)
    y, y_eager = op.gelu(x), x_eager * torch.sigmoid(1.702 * x_eager)
    y.backward(grad)
    y_eager.backward(grad)
    # In 16-bit the composite rounds after each of its ops; ours rounds once.
    slack = 4 if dtype in (torch.float16, torch.bfloat16) else 1
    tol = {k: v * slack for k, v in TOLERANCES[dtype].items()}
    torch.testing.assert_close(y, y_eager, **tol)
    torch.testing.assert_close(x.grad, x_eager.grad, **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["transposed", "step_slice", "storage_offset", "expanded", "channels_last"])
def test_strided_inputs(op, device, dtype, layout):
    x = layouts(device, dtype)[layout]
    before = x.clone()
    y = op.gelu(x)
    assert_matches(y, reference.gelu_reference(x.double()), dtype)
    assert torch.equal(x, before)
    grad, saved = layouts(device, dtype)[layout], layouts(device, dtype)[layout]
    assert_matches(torch.ops.gelu.backward(grad, saved),
                   reference.gelu_backward_reference(grad.double(), saved.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_saturates_without_overflow(op, device, dtype):
    """e^-1.702x of a large positive x is never formed, nor inf * 0: finite inputs
    give finite values (x for x >> 0, -0 for x << 0) and gradients (1 and 0), even
    where 1.702 x overflows. At -inf, like the formula, -inf * 0 is NaN."""
    big = torch.finfo(dtype).max
    x = torch.tensor([big, -big, 1e4, -1e4, 100.0, -100.0, 30.0, -30.0, 0.0, -0.0, float("inf")],
                     device=device, dtype=torch.float64).to(dtype)
    y = op.gelu(x)
    dx = torch.ops.gelu.backward(torch.ones_like(x), x)
    assert not y.isnan().any() and not dx[:-1].isnan().any()
    assert torch.equal(y[[0, 2, 4, -1]], x[[0, 2, 4, -1]])
    assert (y[[1, 3]] == 0).all()
    assert dx[0] == 1 and dx[1] == 0
    finite = x[2:-1]
    assert_matches(y[2:-1], reference.gelu_reference(finite.double()), dtype)
    assert_matches(dx[2:-1], reference.gelu_backward_reference(torch.ones_like(finite).double(), finite.double()), dtype)
    assert op.gelu(torch.tensor([float("nan")], device=device, dtype=dtype)).isnan().all()


@pytest.mark.cuda
def test_indexing_past_2_31_elements(op):
    """64-bit indices: elements past 2^31 are computed, and the tail after them too."""
    n = 2**31 + 9
    if torch.cuda.mem_get_info()[0] < 3 * n * 2:
        pytest.skip("needs 13 GB of free GPU memory")
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = op.gelu(x)
    for part in (slice(0, 4096), slice(2**31 - 4096, n)):
        assert_matches(y[part], reference.gelu_reference(x[part].double()), torch.bfloat16)


# ------------------------------------------------------------------- autograd surface


def test_gradcheck(op, device):
    x = random_input((5, 7), device, torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(op.gelu, (x,))
    assert torch.autograd.gradcheck(op.GELUFunction.apply, (x,))


def test_opcheck(op, device):
    x = random_input((3, 17), device, torch.float32).requires_grad_()
    torch.library.opcheck(torch.ops.gelu.forward.default, (x,))
    torch.library.opcheck(torch.ops.gelu.backward.default, (torch.randn_like(x), x.detach()))


def test_compile_fullgraph(op, device):
    gelu = op.gelu  # resolve the Op handle outside the traced function

    def f(x):
        return gelu(x * 2) + 1

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
    want_y = reference.gelu_reference(x.detach().double())
    want_dx = reference.gelu_backward_reference(grad.double(), x.detach().double())
    for fn in (op.GELU(), op.GELUFunction.apply, op.gelu):
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
    with pytest.raises(RuntimeError, match=f"gelu.forward: x must be a floating-point tensor, got {name}"):
        torch.ops.gelu.forward(x)
    with pytest.raises(RuntimeError, match=f"gelu.backward: x must be a floating-point tensor, got {name}"):
        torch.ops.gelu.backward(x, x)


def test_backward_rejects_mismatched_grad(op, device):
    x = torch.randn(4, device=device)
    with pytest.raises(RuntimeError, match=r"gelu.backward: grad has shape \[3\] but x has shape \[4\]"):
        torch.ops.gelu.backward(torch.ones(3, device=device), x)
    with pytest.raises(RuntimeError, match="gelu.backward: grad has dtype Double but x has dtype Float"):
        torch.ops.gelu.backward(torch.ones(4, device=device, dtype=torch.float64), x)


@pytest.mark.cuda
def test_backward_rejects_mismatched_devices(op):
    x = torch.randn(4, device="cuda")
    with pytest.raises(RuntimeError, match="gelu.backward: grad is on cpu but x is on cuda:0"):
        torch.ops.gelu.backward(torch.ones(4), x)


def test_reference_import_builds_nothing():
    code = ("import sys, ops.gelu, ops.gelu.reference; "
            "assert 'jit_loader' not in sys.modules and 'ops.gelu.gelu' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=jit_loader.REPO_ROOT)
