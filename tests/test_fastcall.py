"""The loader's fast Python entry to an op (``jit_loader.fast_op``, jit_tools/fastcall.py):
the same results, errors and behaviour as a call through ``torch.ops``, on aten ops (no
build needed) and on a bundled op with defaults and keywords (scatter.sum).

Every check compares the fast object with the overload it was made from, called the same
way; only calls the entry takes itself run the new code, and the tests that must reach the
fallback say so by what they observe (a ``__torch_function__`` that ran)."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import jit_loader
from jit_tools import _torch_private, fastcall

aten = torch.ops.aten


def fast(overload):
    f = jit_loader.fast_op(overload)
    assert _torch_private.fast_call_of(f) is not None, f"{overload} has no fast entry"
    return f


def outcome(fn, *args, **kwargs):
    """("ok", result) or (exception type, message) of one call."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the comparison is the point
        return type(e), str(e)


def assert_same(overload, *args, **kwargs):
    """The fast object and the overload give the same result, or raise the same error."""
    want = outcome(overload, *args, **kwargs)
    got = outcome(fast(overload), *args, **kwargs)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        results = want[1] if isinstance(want[1], tuple) else (want[1],)
        fast_results = got[1] if isinstance(got[1], tuple) else (got[1],)
        assert len(results) == len(fast_results)
        for w, g in zip(results, fast_results):
            if isinstance(w, torch.Tensor):
                assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
                assert torch.equal(g, w)
            else:
                assert g == w and type(g) is type(w)
    else:
        assert got[1] == want[1]
    return got


def test_is_the_overload_to_torch():
    f = fast(aten.sigmoid.default)
    assert isinstance(f, torch._ops.OpOverload)
    assert hash(f) == hash(aten.sigmoid.default)
    assert str(f) == str(aten.sigmoid.default) and f._schema == aten.sigmoid.default._schema
    assert f.overloadpacket is aten.sigmoid
    assert jit_loader.fast_op(aten.sigmoid.default) is f  # one per overload
    assert jit_loader.fast_op(f) is f


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_tensor_arguments(dtype):
    x = (torch.randn(3, 5) * 10).to(dtype)
    assert_same(aten.sigmoid.default, x.double())
    assert_same(aten.neg.default, x)
    assert_same(aten.mul.Tensor, x, x.t().contiguous().t())
    assert_same(aten.where.self, x > 0, x, -x)


def test_scalars_lists_strings_and_optionals():
    x = torch.randn(2, 3, 4, 5)
    assert_same(aten.narrow.default, x, 1, 1, 2)  # int and SymInt
    assert_same(aten.narrow.default, x, -1, 0, 3)
    assert_same(aten.permute.default, x, [3, 1, 0, 2])  # int[]
    assert_same(aten.permute.default, x, (3, 1, 0, 2))
    assert_same(aten.permute.default, x, torch.Size([3, 1, 0, 2]))
    assert_same(aten.upsample_bilinear2d.vec, x, [7, 9], False, None)  # SymInt[]?, float[]?
    assert_same(aten.upsample_bilinear2d.vec, x, None, True, [1.5, 2.0])
    assert_same(aten.upsample_bilinear2d.vec, x, None, True, [2, 3])  # ints for float[]
    assert_same(aten.div.Tensor_mode, x, x + 3, rounding_mode="floor")  # str?, keyword-only
    assert_same(aten.div.Tensor_mode, x, x + 3, rounding_mode=None)
    assert_same(aten.gelu.default, x, approximate="tanh")  # str keyword, default
    assert_same(aten.gelu.default, x)
    assert_same(aten.amax.default, x, [1, 2], True)  # int[1] given two, keyword default
    assert_same(aten.amax.default, x, 1)  # int[1] given one int
    assert_same(aten.amax.default, x, keepdim=True)


def test_bad_calls_raise_what_torch_ops_raises():
    x = torch.randn(4, 5)
    assert_same(aten.narrow.default, x, 5, 0, 1)  # the kernel's error
    assert_same(aten.narrow.default, x, 0, 0)  # missing argument
    assert_same(aten.narrow.default, x, 0, 0, 1, 2)  # one too many
    assert_same(aten.narrow.default, x, 0.5, 0, 1)  # float for int
    assert_same(aten.narrow.default, x, True, 0, 1)  # bool for int
    assert_same(aten.narrow.default, x, 2 ** 70, 0, 1)  # beyond int64
    assert_same(aten.narrow.default, "x", 0, 0, 1)  # not a tensor
    assert_same(aten.narrow.default, x, 0, 0, length=1)  # a keyword
    assert_same(aten.narrow.default, x, 0, 0, lenght=1)  # an unknown keyword
    assert_same(aten.narrow.default, x, 0, 0, 1, dim=0)  # a keyword given twice
    assert_same(aten.permute.default, x, [1, "0"])
    assert_same(aten.permute.default, x, [1])
    assert_same(aten.upsample_bilinear2d.vec, x[None, None], [3], False, None)  # SymInt[2]
    assert_same(aten.gelu.default, x, approximate="cubic")
    assert_same(aten.gelu.default, x, approximate=3)


def test_tuple_none_and_number_results():
    x = torch.randn(6, 4)
    assert_same(aten.max.dim, x, 1)  # (values, indices)
    assert_same(aten.max.dim, x, 0, True)
    assert_same(aten.native_layer_norm_backward.default, torch.randn(2, 4), torch.randn(2, 4),
                [4], torch.randn(2, 1), torch.randn(2, 1), None, None, [True, False, False])
    assert_same(aten.is_nonzero.default, torch.tensor([2.0]))  # bool result
    assert_same(aten.is_nonzero.default, torch.tensor([0.0]))
    assert_same(aten.sym_size.int, x, 1)  # int result


def test_schemas_it_does_not_take_stay_the_overload():
    # Tensor[], Scalar, ScalarType, Device: torch.ops's own conversion serves them.
    for overload in (aten.cat.default, aten.add.Tensor, aten.sum.dim_IntList, aten.clamp.default,
                     aten.empty.memory_format, aten.leaky_relu.default,
                     aten._local_scalar_dense.default):
        assert jit_loader.fast_op(overload) is overload
    assert jit_loader.fast_op(torch.sigmoid) is torch.sigmoid  # not an overload at all


def test_autograd_through_the_fast_entry():
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    f = fast(aten.sigmoid.default)
    assert torch.autograd.gradcheck(f, (x,))
    y = f(x)
    assert y.grad_fn is not None and y.grad_fn.name() == "SigmoidBackward0"
    with torch.no_grad():
        assert f(x).grad_fn is None


class Recorded(torch.Tensor):
    """A subclass whose __torch_function__ records the functions it sees."""
    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_subclasses_and_modes_reach_torch_function():
    f = fast(aten.sigmoid.default)
    x = torch.randn(4)
    Recorded.seen.clear()
    y = f(x.as_subclass(Recorded))
    assert Recorded.seen, "the subclass's __torch_function__ did not run"
    assert type(y) is Recorded and torch.equal(y.as_subclass(torch.Tensor), torch.sigmoid(x))

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        y = f(x)
    assert Count.calls == 1 and torch.equal(y, torch.sigmoid(x))

    class Dispatch(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Dispatch.seen.append(func)
            return func(*args, **(kwargs or {}))

    with Dispatch():  # below the entry: the dispatcher's Python key, as through torch.ops
        y = f(x)
    assert Dispatch.seen == [aten.sigmoid.default] and torch.equal(y, torch.sigmoid(x))


def test_parameters_take_the_entry():
    p = torch.nn.Parameter(torch.randn(3))
    y = fast(aten.neg.default)(p)
    assert type(y) is torch.Tensor and torch.equal(y, -p.detach()) and y.requires_grad


def test_torch_compile_sees_the_op():
    f = fast(aten.sigmoid.default)
    compiled = torch.compile(lambda t: f(t) * 2, backend="eager", fullgraph=True)
    x = torch.randn(8)
    assert torch.equal(compiled(x), torch.sigmoid(x) * 2)


def test_other_threads_run_while_an_op_runs():
    """The entry releases the GIL around the op, as torch's bindings do: a thread doing a
    long op does not stop another thread's Python."""
    f = fast(aten.mm.default)
    a = torch.randn(1500, 1500)
    started, counts = threading.Event(), []

    def spin():
        started.set()
        n = 0
        while not done.is_set():
            n += 1
        counts.append(n)

    done = threading.Event()
    spinner = threading.Thread(target=spin)
    spinner.start()
    started.wait()
    for _ in range(3):
        f(a, a)
    done.set()
    spinner.join()
    assert counts[0] > 1000


def test_off_by_environment(monkeypatch):
    monkeypatch.setenv(fastcall.ENV, "0")
    assert jit_loader.fast_op(aten.neg.default) is aten.neg.default


@pytest.fixture(scope="module")
def scatter_op():
    return jit_loader.load("scatter")


def test_a_bundled_op_with_defaults_and_keywords(scatter_op):
    overload = torch.ops.scatter.sum.default
    src = torch.randn(5, 12)
    index = torch.randint(0, 4, (12,))
    assert_same(overload, src, index)  # dim=-1, dim_size=None from the schema
    assert_same(overload, src, index, -1, 7)
    assert_same(overload, src, index, dim_size=7)
    assert_same(overload, src, index, dim=1, dim_size=None)
    assert_same(overload, src, index, 0)  # the kernel's error: index along dim 0
    assert_same(overload, src, index.float())
    from ops.scatter import scatter as surface
    assert _torch_private.fast_call_of(surface._SUM) is not None  # the surface takes it
