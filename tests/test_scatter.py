"""The scatter op, specified by tests: torch_scatter's semantics checked against a loop over
elements (ops/scatter/reference.py: the definition) and against torch's scatter_add_ /
scatter_reduce, over reduction x dtype x index layout x device.
"""

from __future__ import annotations

import pytest
import torch

import jit_loader
from jit_tools.tools.testing import OpTester
from ops.scatter.reference import TOLERANCES, example_inputs, scatter_loop, scatter_torch

REDUCES = ["sum", "mean", "max", "min"]
FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64]


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("scatter")


@pytest.fixture(autouse=True)
def no_index_error_left_behind(op):
    """CUDA records index errors for later (no host sync per call): whatever a test left
    behind fails that test's teardown, not the next test's call."""
    yield
    if torch.cuda.is_available():
        op.check_errors("cuda")


def _src(shape, dtype, device):
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    return torch.randint(-50, 50, shape, device=device, dtype=dtype)


def _assert_close(got, want, dtype, what=""):
    assert got.dtype == dtype, (what, got.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    torch.testing.assert_close(got.cpu().double(), want.cpu().double(), **TOLERANCES[dtype],
                               msg=lambda m: f"{what}: {m}")


def _check_against_loop(op, src, index, dim, dim_size, reduce, out=None, **options):
    """Values (and arg for max/min) against the loop reference, computed in float64 from
    the very values the op received."""
    exact = src.cpu().double() if src.is_floating_point() else src.cpu()
    want, want_arg = scatter_loop(exact, index.cpu(), dim,
                                  None if out is None else out.cpu().to(exact.dtype), dim_size,
                                  reduce)
    if reduce in ("max", "min"):
        fn = op.scatter_max if reduce == "max" else op.scatter_min
        got, arg = fn(src, index, dim, out, dim_size, **options)
        assert arg.dtype == torch.long and torch.equal(arg.cpu(), want_arg), (arg, want_arg)
    else:
        got = op.scatter(src, index, dim, out, dim_size, reduce, **options)
    _assert_close(got, want, src.dtype, reduce)
    return got


# (src shape, index shape, dim): torch_scatter's broadcasting cases. A 1-D index lies along
# dim; a shorter index gains trailing dims; sizes of 1 repeat; negative dims count back.
LAYOUTS = {
    "edges x features, 1-D index": ((23, 5), (23,), 0),
    "1-D": ((31,), (31,), 0),
    "last dim": ((4, 19), (4, 19), -1),
    "1-D index along dim 1 of 3-D": ((3, 17, 4), (17,), 1),
    "index varies over all dims": ((3, 17, 4), (3, 17, 4), -2),
    "index broadcast over rows": ((3, 17, 4), (1, 17, 4), 1),
    "index without trailing dim": ((3, 17, 4), (3, 17), 1),
    "index mixed broadcast": ((2, 3, 13, 2, 3), (2, 1, 13, 1, 3), 2),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("reduce", REDUCES)
def test_layouts_match_loop_reference(op, device, reduce, layout):
    src_shape, index_shape, dim = LAYOUTS[layout]
    src = _src(src_shape, torch.float64, device)
    index = torch.randint(0, 6, index_shape, device=device)
    _check_against_loop(op, src, index, dim, 7, reduce)  # node 6 stays empty
    _check_against_loop(op, src, index, dim, None, reduce)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_dtypes_match_loop_reference(op, device, reduce, dtype):
    src = _src((40, 6), dtype, device)
    index = torch.randint(0, 9, (40,), device=device)
    _check_against_loop(op, src, index, 0, 10, reduce)
    if not dtype.is_floating_point:  # small integers: plenty of ties, first position wins
        _check_against_loop(op, torch.randint(0, 3, (40, 6), device=device, dtype=dtype), index,
                            0, 10, reduce)


@pytest.mark.parametrize("route", ["random", "sorted", "sorted hint", "deterministic"])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
def test_graph_workload_matches_torch(op, device, reduce, route, dtype):
    """Every kernel route on a graph-sized problem against scatter_add_ / scatter_reduce."""
    src, index, nodes = example_inputs(device, dtype, edges=3000, features=12, nodes=300,
                                       sorted=route != "random", requires_grad=False)
    options = {"sorted hint": dict(index_sorted=True), "deterministic": dict(deterministic=True)}
    got = op.scatter(src, index, 0, None, nodes, reduce, **options.get(route, {}))
    want = scatter_torch(src.double() if dtype.is_floating_point else src, index, 0,
                         dim_size=nodes, reduce=reduce)
    _assert_close(got, want, dtype, reduce)
    inferred = op.scatter(src, index, 0, reduce=reduce)  # dim_size from index (detects sorting)
    assert inferred.shape[0] == int(index.max()) + 1
    _assert_close(inferred, want[: inferred.shape[0]], dtype, f"{reduce}, dim_size inferred")


@pytest.mark.parametrize("reduce", REDUCES)
def test_out_accumulates_in_place(op, device, reduce):
    src = _src((30, 5), torch.float64, device)
    index = torch.randint(0, 8, (30,), device=device)
    out = _src((10, 5), torch.float64, device)
    before = out.clone()
    got = _check_against_loop(op, src, index, 0, None, reduce, out=out)
    assert got is out and not torch.equal(out, before)
    if reduce in ("max", "min"):  # arg = 30 (src.size(0)) where out's own value stayed
        again = before.clone()
        _, arg = getattr(op, f"scatter_{reduce}")(src, index, 0, again)
        kept = arg == 30
        assert torch.equal(again[kept], before[kept])
        assert torch.equal(again[~kept], src.gather(0, arg.clamp_max(29))[~kept])
        assert kept[8:].all() and torch.equal(again, out)


@pytest.mark.parametrize("reduce", REDUCES)
def test_integer_out(op, device, reduce):
    src = torch.randint(-20, 20, (25, 3), device=device, dtype=torch.int32)
    index = torch.randint(0, 5, (25,), device=device)
    out = torch.randint(-20, 20, (6, 3), device=device, dtype=torch.int32)
    _check_against_loop(op, src, index, 0, None, reduce, out=out)


@pytest.mark.parametrize("reduce", REDUCES)
def test_empty_groups_give_zero_and_sentinel(op, device, reduce):
    src = _src((12, 3), torch.float32, device) - 10  # all negative: max of nothing is still 0
    index = torch.tensor([0, 0, 2, 2, 2, 5, 5, 5, 5, 5, 0, 2], device=device)
    got, aux = torch.ops.scatter.reduce(src, index, 0, 8, reduce)
    empty = torch.tensor([1, 3, 4, 6, 7], device=device)
    assert torch.count_nonzero(got[empty]) == 0 and torch.count_nonzero(got[[0, 2, 5]] == 0) == 0
    if reduce in ("max", "min"):
        assert (aux[empty] == 12).all() and (aux[[0, 2, 5]] < 12).all()


@pytest.mark.parametrize("reduce", REDUCES)
def test_empty_inputs(op, device, reduce):
    for src_shape, index, dim_size in [((0, 4), torch.empty(0, dtype=torch.long), 3),
                                       ((0, 4), torch.empty(0, dtype=torch.long), None),
                                       ((5, 0), torch.tensor([1, 0, 2, 2, 0]), None),
                                       ((5, 3), torch.tensor([1, 0, 2, 2, 0]), 0)]:
        src = torch.randn(src_shape, device=device, requires_grad=True)
        index = index.to(device)
        if dim_size == 0:
            if device == "cuda":  # checked on the device, raised at the next sync point
                op.scatter(src, index, 0, dim_size=dim_size, reduce=reduce)
                with pytest.raises(RuntimeError, match="index out of range"):
                    op.check_errors(device)
            else:
                with pytest.raises(RuntimeError, match="index out of range"):
                    op.scatter(src, index, 0, dim_size=dim_size, reduce=reduce)
            continue
        got = op.scatter(src, index, 0, dim_size=dim_size, reduce=reduce)
        n = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
        assert got.shape == (n, src_shape[1]) and torch.count_nonzero(got) == 0
        got.sum().backward()
        assert src.grad.shape == src.shape and torch.count_nonzero(src.grad) == 0


def test_strided_inputs(op, device):
    """Layouts the op tester's leave out: a non-contiguous out written in place (with
    non-contiguous src and index), and an index broadcast by a zero stride."""
    base = torch.randn(6, 40, device=device, dtype=torch.float64)
    src = base.t()[:, ::2]                        # [40, 3], non-contiguous
    index_base = torch.randint(0, 9, (80,), device=device)
    index = index_base[::2]                       # non-contiguous index
    out_base = torch.randn(3, 10, device=device, dtype=torch.float64)
    assert not src.is_contiguous() and not index.is_contiguous()
    for reduce in REDUCES:
        out = out_base.clone().t()                # [10, 3], non-contiguous out
        _check_against_loop(op, src, index, 0, None, reduce, out=out)
    expanded = torch.randint(0, 4, (40, 1), device=device).expand(40, 3)  # stride-0 index
    _check_against_loop(op, src, expanded, 0, 4, "sum")


# --- autograd --------------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_into_out_and_twice(op, device, reduce):
    """The gradient of out, written in place (the gradient of src is the op tester's
    gradcheck), and sum's and mean's second derivative."""
    src = torch.randn(20, 3, device=device, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 6, (20,), device=device)
    out = torch.randn(7, 3, device=device, dtype=torch.float64, requires_grad=True)
    # out is written in place: differentiate through a copy, which receives out's gradient.
    assert torch.autograd.gradcheck(
        lambda s, o: op.scatter(s, index, 0, o.clone(), reduce=reduce), (src, out))
    if reduce in ("sum", "mean"):
        assert torch.autograd.gradgradcheck(lambda s: op.scatter(s, index, 0, None, 7, reduce),
                                            (src,))


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradients_match_torch_autograd(op, device, reduce):
    src, index, nodes = example_inputs(device, torch.float32, edges=500, features=8, nodes=60)
    grad = torch.randn(nodes, 8, device=device)
    (got,) = torch.autograd.grad(op.scatter(src, index, 0, None, nodes, reduce), src, grad)
    ref_src = src.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(scatter_torch(ref_src, index, 0, dim_size=nodes, reduce=reduce),
                                  ref_src, grad)
    _assert_close(got, want, torch.float32, reduce)


def test_in_place_autograd_semantics(op, device):
    src = torch.randn(10, 2, device=device, requires_grad=True)
    index = torch.randint(0, 4, (10,), device=device)
    leaf = torch.zeros(4, 2, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        op.scatter(src, index, 0, leaf)
    out = leaf * 1
    version = out._version
    result = op.scatter(src, index, 0, out, reduce="sum")
    assert result is out and out._version > version
    assert out.grad_fn is not None and "ScatterIntoFunction" in out.grad_fn.name()
    out.sum().backward()
    assert torch.equal(leaf.grad, torch.ones_like(leaf)) and torch.equal(src.grad, torch.ones_like(src))
    # A tensor saved before the in-place write fails autograd's version check.
    x = torch.randn(4, 2, device=device, requires_grad=True)
    y = x.exp()
    op.scatter(src.detach(), index, 0, y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_max_gradient_goes_to_arg_position(op, device):
    src = torch.tensor([[1.0], [5.0], [3.0], [5.0], [-2.0]], device=device, requires_grad=True)
    index = torch.tensor([0, 0, 1, 0, 1], device=device)
    values, arg = op.scatter_max(src, index, 0, dim_size=3)
    assert values.squeeze(1).tolist() == [5.0, 3.0, 0.0] and arg.squeeze(1).tolist() == [1, 2, 5]
    values.sum().backward()
    assert src.grad.squeeze(1).tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]


# --- PyTorch machinery -----------------------------------------------------------------------


@pytest.mark.parametrize("reduce", REDUCES)
def test_opcheck_into_out(op, device, reduce):
    """The in-place op behind out= (the others are the op tester's opcheck)."""
    src = torch.randn(30, 4, device=device, requires_grad=True)
    index = torch.randint(0, 7, (30,), device=device)
    out = torch.randn(9, 4, device=device)
    torch.library.opcheck(torch.ops.scatter.reduce_.default,
                          (out, src.detach(), index, 0, reduce))


def test_sum_op_is_reduce_sum(op, device):
    """scatter::sum, the op behind scatter(reduce="sum") with the default options: reduce's
    values on every index layout and with dim_size inferred, and its gradient."""
    torch.manual_seed(12)
    src = torch.randn(30, 4, device=device, requires_grad=True)
    for index, dim, dim_size in [(torch.randint(0, 7, (30,)), 0, 9),
                                 (torch.randint(0, 7, (30,)), 0, None),
                                 (torch.randint(0, 5, (30, 4)), 0, 5),
                                 (torch.randint(0, 3, (30, 1)), 0, 3),
                                 (torch.randint(0, 6, (30, 4)), 1, 6),
                                 (torch.randint(0, 6, (30, 4)), -1, None)]:
        index = index.to(device)
        got = torch.ops.scatter.sum(src, index, dim, dim_size)
        want = torch.ops.scatter.reduce(src, index, dim, dim_size, "sum")[0]
        if device == "cpu":
            assert torch.equal(got, want), (tuple(index.shape), dim, dim_size)
        else:  # atomic adds: the order of a sum, and so its last bit, varies from run to run
            torch.testing.assert_close(got, want, msg=lambda m: f"{tuple(index.shape)}, {dim}, "
                                                                f"{dim_size}: {m}")
        (g,) = torch.autograd.grad(got, src, torch.ones_like(got))
        (w,) = torch.autograd.grad(want, src, torch.ones_like(want))
        assert torch.equal(g, w)
    assert op.scatter(src, index, -1, None, None).grad_fn.name().endswith("ScatterSumFunction>")
    with pytest.raises(RuntimeError, match="index out of range: found -1"):
        torch.ops.scatter.sum(src, torch.full((30,), -1, device=device), 0, None)


@pytest.mark.parametrize("reduce", REDUCES)
def test_compile_fullgraph_into_out(op, reduce):
    """out written in place inside a compiled graph, beside a scatter of a new tensor (the
    op alone is the op tester's compile check)."""
    torch._dynamo.reset()
    src, index, nodes = example_inputs("cpu", torch.float32, edges=200, features=4, nodes=30)

    def layer(x, out):
        y = op.scatter(x * 2, index, 0, None, nodes, reduce)
        z = op.scatter(x, index, 0, out, reduce=reduce)
        return y.relu() + z

    compiled = torch.compile(layer, fullgraph=True)
    out = torch.randn(nodes, 4)
    got = compiled(src, out.clone())
    want = layer(src, out.clone())
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got.sum(), src)
    (w,) = torch.autograd.grad(want.sum(), src)
    torch.testing.assert_close(g, w)


def test_module(op, device):
    layer = op.Scatter("max", dim=0)
    src, index, nodes = example_inputs(device, torch.float32, edges=50, features=3, nodes=9)
    torch.testing.assert_close(layer(src, index, nodes), op.scatter_max(src, index, 0, None, nodes)[0])
    assert "reduce='max'" in repr(layer)


class TestScatter(OpTester):
    """The op tester's checks of every reduction, random and sorted index, the size from
    the index, no messages: reference.check_cases."""
    op_name = "scatter"


def test_deterministic_repeats_bitwise(op, device):
    src, index, nodes = example_inputs(device, torch.float32, edges=4000, features=16, nodes=50,
                                       requires_grad=False)
    for reduce in REDUCES:
        first = op.scatter(src, index, 0, None, nodes, reduce, deterministic=True)
        for _ in range(3):
            assert torch.equal(op.scatter(src, index, 0, None, nodes, reduce, deterministic=True),
                               first)


# --- bad input ---------------------------------------------------------------------------------


def _call(device, reduce="sum", **changes):
    args = dict(src=torch.randn(6, 3, device=device), index=torch.tensor([0, 1, 1, 3, 2, 0], device=device),
                dim=0, out=None, dim_size=4, reduce=reduce)
    args.update(changes)
    return args


BAD_INPUTS = {
    "index too large": (dict(index=torch.tensor([0, 1, 4, 3, 2, 0])),
                        r"index out of range: found 4, but indices must be in \[0, 4\)"),
    "negative index": (dict(index=torch.tensor([0, 1, -1, 3, 2, 0])),
                       r"index out of range: found -1, but indices must be in \[0, 4\)"),
    "negative index, dim_size inferred": (dict(index=torch.tensor([0, -2, 1, 3, 2, 0]), dim_size=None),
                                          r"index out of range: found -2, but indices must be >= 0"),
    "int32 index": (dict(index=torch.tensor([0, 1, 1, 3, 2, 0], dtype=torch.int32)),
                    r"index must be an int64 \(torch.long\) tensor, got Int"),
    "index shape": (dict(index=torch.zeros(5, dtype=torch.long)),
                    r"index of shape \[5\] cannot be broadcast to src of shape \[6, 3\] along dim 0"),
    "index rank": (dict(index=torch.zeros(6, 3, 1, dtype=torch.long)),
                   r"index must have between 1 and src.dim\(\) = 2 dimensions, got 3-D"),
    "dim": (dict(dim=2), r"dim must be in \[-2, 1\] for src of shape \[6, 3\], got 2"),
    "reduce": (dict(reduce="prod"), r"reduce must be one of \"sum\", \"mean\", \"max\", \"min\", got \"prod\""),
    "negative dim_size": (dict(dim_size=-1), r"dim_size must be >= 0, got -1"),
    "int8 src": (dict(src=torch.ones(6, 3, dtype=torch.int8)),
                 r"src must be float, double, half, bfloat16, int32 or int64, got Char"),
    "out shape": (dict(out=torch.zeros(4, 2), dim_size=None),
                  r"out of shape \[4, 2\] must match src of shape \[6, 3\] in every dimension but dim 0"),
    "out dtype": (dict(out=torch.zeros(4, 3, dtype=torch.float64), dim_size=None),
                  r"out has dtype Double but src has dtype Float"),
    "unsorted index promised sorted": (dict(index_sorted=True),
                                       r"index_sorted=True, but index is not sorted"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_names_argument_and_value(op, device, case):
    changes, message = BAD_INPUTS[case]
    changes = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in changes.items()}
    args = _call(device, **changes)
    index_sorted = args.pop("index_sorted", None)
    lazy = LAZY_CUDA_MESSAGES.get(case) if device == "cuda" else None
    if lazy:  # CUDA, dim_size given: checked on the device, raised at the next sync point
        op.scatter(**args, index_sorted=index_sorted)
        with pytest.raises(RuntimeError, match=lazy):
            op.check_errors(device)
        op.check_errors(device)  # reported once
        return
    with pytest.raises(RuntimeError, match=message):
        op.scatter(**args, index_sorted=index_sorted)


LAZY_CUDA_MESSAGES = {
    "index too large": r"index out of range in an earlier call on cuda:0: found 4, but indices "
                       r"must be in \[0, 4\)",
    "negative index": r"index out of range in an earlier call on cuda:0: found -1, but indices "
                      r"must be in \[0, 4\)",
    "unsorted index promised sorted": r"index_sorted=True, but the index of an earlier call on "
                                      r"cuda:0 was not sorted",
}


def test_check_bounds_off_skips_bad_entries(op, device):
    src = torch.ones(4, 2, device=device)
    index = torch.tensor([0, 7, 1, -3], device=device)
    got = op.scatter(src, index, 0, None, 2, check_bounds=False)
    assert got.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    op.check_errors(device)  # nothing recorded


@pytest.mark.cuda
def test_cuda_lazy_error_raises_at_next_call(op):
    src = torch.randn(5, 2, device="cuda")
    op.scatter(src, torch.tensor([0, 9, 1, 1, 0], device="cuda"), 0, None, 3)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match=r"index out of range in an earlier call on cuda:0: "
                                           r"found 9, but indices must be in \[0, 3\)"):
        op.scatter(src, torch.tensor([0, 1, 1, 1, 0], device="cuda"), 0, None, 3)
    op.check_errors("cuda")


def test_fake_kernels_reject_meta_mixed_with_cpu(op):
    src = torch.randn(4, 2)
    with pytest.raises(RuntimeError, match=r"scatter: index is on meta but src is on cpu"):
        op.scatter(src, torch.tensor([0, 1, 1, 0], device="meta"), 0, dim_size=2)
    with pytest.raises(RuntimeError, match=r"scatter: out is on meta but src is on cpu"):
        op.scatter(src, torch.tensor([0, 1, 1, 0]), 0, torch.zeros(2, 2, device="meta"))


@pytest.mark.cuda
def test_inputs_on_different_devices(op):
    src = torch.randn(4, 2, device="cuda")
    with pytest.raises(RuntimeError, match=r"scatter: index is on cpu but src is on cuda:0"):
        op.scatter(src, torch.tensor([0, 1, 1, 0]), 0)
    with pytest.raises(RuntimeError, match=r"scatter: index is on cuda:0 but src is on cpu"):
        op.scatter(src.cpu(), torch.tensor([0, 1, 1, 0], device="cuda"), 0)
    with pytest.raises(RuntimeError, match=r"scatter: out is on cpu but src is on cuda:0"):
        op.scatter(src, torch.tensor([0, 1, 1, 0], device="cuda"), 0, torch.zeros(2, 2))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_routes_match_cpu(op, reduce, dtype):
    """Large problems through every CUDA route (vectorised and not) against the CPU op."""
    torch.manual_seed(11)
    for features in (64, 3):
        src, index, nodes = example_inputs("cpu", dtype, edges=20000, features=features,
                                           nodes=1500, requires_grad=False)
        want = op.scatter(src, index, 0, None, nodes, reduce)
        for options in (dict(), dict(deterministic=True)):
            got = op.scatter(src.cuda(), index.cuda(), 0, None, nodes, reduce, **options)
            _assert_close(got, want.double() if dtype.is_floating_point else want, dtype,
                          f"{reduce} {options}")
        sorted_index, perm = index.sort(stable=True)
        want = op.scatter(src[perm], sorted_index, 0, None, nodes, reduce)
        got = op.scatter(src[perm].cuda(), sorted_index.cuda(), 0, None, nodes, reduce,
                         index_sorted=True)
        _assert_close(got, want.double() if dtype.is_floating_point else want, dtype,
                      f"{reduce} sorted")
    op.check_errors("cuda")
