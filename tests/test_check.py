"""jit_loader.check: the one-line op check (reference, gradcheck, opcheck, compile)."""

from __future__ import annotations

import pytest
import torch

import jit_loader
from jit_tools.tools.check import CheckResult

# aot_eager exercises Dynamo, fake tensors and AOT autograd like inductor does, without
# generating and compiling C++ for every graph (the notebooks run the inductor default).
BACKEND = "aot_eager"


def silu_reference(x):
    return x * torch.sigmoid(x)


def silu_grad(x, grad):
    s = torch.sigmoid(x)
    return grad * (s + x * s * (1 - s))


class SiLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return silu_grad(x, grad)


class WrongBackwardSiLU(SiLUFunction):
    """Right forward, backward off by a factor of 2: only gradient checks can tell."""

    @staticmethod
    def backward(ctx, grad):
        return 2 * SiLUFunction.backward(ctx, grad)


@torch.library.custom_op("jit_check_test::silu", mutates_args=())
def custom_silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@custom_silu.register_fake
def _(x):
    return torch.empty_like(x)


def _silu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return silu_grad(x, grad)


custom_silu.register_autograd(_silu_backward, setup_context=_silu_setup)


@torch.library.custom_op("jit_check_test::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def test_correct_function_passes_every_check(capsys):
    result = jit_loader.check(SiLUFunction, [(4, 8)], reference=silu_reference,
                              compile_backend=BACKEND)
    assert isinstance(result, CheckResult) and result
    statuses = {(row.check, row.dtype): row.status for row in result.rows}
    assert statuses == {
        ("reference", "float32"): "pass", ("reference grad", "float32"): "pass",
        ("reference", "float64"): "pass", ("reference grad", "float64"): "pass",
        ("gradcheck", "float64"): "pass", ("opcheck", ""): "n/a",
        (f"compile ({BACKEND})", "float64"): "pass",
    }
    gradcheck = result.row("gradcheck")
    assert gradcheck.error is not None and gradcheck.error <= gradcheck.allowed
    printed = capsys.readouterr().out
    assert printed.startswith("check SiLUFunction: PASS (6 passed, 0 failed, 1 n/a)")
    assert "fn calls no custom dispatcher op" in printed


def test_wrong_backward_fails_gradcheck(capsys):
    result = jit_loader.check(WrongBackwardSiLU, [(4, 8)], reference=silu_reference,
                              compile_backend=None)
    assert not result
    gradcheck = result.row("gradcheck")
    assert gradcheck.status == "FAIL"
    assert gradcheck.detail.startswith("Jacobian mismatch for output 0 with respect to input 0")
    assert gradcheck.error > 10 * gradcheck.allowed  # a factor 2 is far past the tolerance
    assert result.row("reference", "float64").status == "pass"
    assert result.row("reference grad", "float64").status == "FAIL"
    gradcheck_line = [line for line in capsys.readouterr().out.splitlines()
                      if line.strip().startswith("gradcheck")]
    assert len(gradcheck_line) == 1 and "FAIL" in gradcheck_line[0]


def test_gradcheck_alone_catches_a_wrong_backward_without_reference():
    result = jit_loader.check(WrongBackwardSiLU, [(3, 5)], opcheck=False, compile_backend=None,
                              verbose=False)
    assert not result
    assert [row.check for row in result.failed] == ["gradcheck"]


def test_wrong_forward_fails_the_reference_comparison():
    result = jit_loader.check(lambda x: x * 1.001, [(16,)], reference=lambda x: x,
                              compile_backend=None, verbose=False)
    assert not result
    assert result.row("reference", "float32").status == "FAIL"
    assert result.row("reference", "float64").status == "FAIL"
    assert result.row("gradcheck").status == "pass"


def test_shape_spec_gives_fresh_random_float64_inputs_that_require_grad():
    seen = []

    def record(x, y):
        seen.append((x.detach().clone(), y.detach().clone(), x.dtype, x.requires_grad))
        return x.sum() + y.sum()

    for _ in range(2):
        jit_loader.check(record, [(2, 3), (4,)], reference=lambda x, y: x.sum() + y.sum(),
                         dtypes=(torch.float64,), gradcheck=False, opcheck=False,
                         compile_backend=None, verbose=False)
    first, second = seen[0], seen[1]
    assert first[0].shape == (2, 3) and first[1].shape == (4,)
    assert first[2] == torch.float64 and first[3]
    assert first[0].abs().sum() > 0
    assert not torch.equal(first[0], second[0])


def test_tensor_inputs_keep_their_requires_grad():
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(5, dtype=torch.float64)  # not differentiated
    result = jit_loader.check(lambda x, m: x * m, (x, mask), reference=lambda x, m: m * x,
                              compile_backend=BACKEND, verbose=False)
    assert result
    assert result.row("gradcheck").status == "pass"


def test_tuple_outputs_and_non_tensor_arguments():
    def fn(x, scale):
        return x * scale, x + scale

    result = jit_loader.check(fn, [(3, 2), 0.5], reference=lambda x, s: (s * x, s + x),
                              compile_backend=BACKEND, verbose=False)
    assert result, result.table()


def test_modules_are_checked_per_dtype():
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 3)
    reference = torch.nn.Linear(4, 3)
    reference.load_state_dict(module.state_dict())
    # The modules live on the CPU; shape specs would otherwise be made on CUDA where present.
    result = jit_loader.check(module, [(2, 4)], reference=reference, compile_backend=BACKEND,
                              device="cpu", verbose=False)
    assert result, result.table()


def test_opcheck_runs_on_the_custom_ops_a_function_calls():
    result = jit_loader.check(lambda x: 2 * custom_silu(x), [(4, 3)],
                              reference=lambda x: 2 * silu_reference(x), compile_backend=BACKEND,
                              verbose=False)
    assert result, result.table()
    row = result.row("opcheck")
    assert row.check == "opcheck jit_check_test::silu" and row.status == "pass"
    assert "faketensor" in row.detail and "aot_dispatch_dynamic" in row.detail


def test_dispatcher_op_directly_or_through_op_argument():
    direct = jit_loader.check(torch.ops.jit_check_test.silu, [(3,)], reference=silu_reference,
                              compile_backend=None, verbose=False)
    assert direct and direct.name == "jit_check_test::silu"
    assert direct.row("opcheck").status == "pass"
    explicit = jit_loader.check(torch.sigmoid, [(3,)], op=torch.ops.jit_check_test.silu.default,
                                gradcheck=False, compile_backend=None, verbose=False)
    assert explicit.row("opcheck jit_check_test::silu").status == "pass"


def test_missing_fake_kernel_fails_opcheck_and_compile():
    result = jit_loader.check(no_fake, [(4,)], gradcheck=False, compile_backend=BACKEND,
                              verbose=False)
    assert not result
    opcheck = result.row("opcheck jit_check_test::no_fake")
    assert opcheck.status == "FAIL" and "test_faketensor" in opcheck.detail
    assert result.row("compile").status == "FAIL"


def test_result_object():
    result = jit_loader.check(SiLUFunction, [(2,)], reference=silu_reference, gradcheck=False,
                              compile_backend=None, verbose=False, name="silu")
    assert bool(result) and result.failed == []
    assert repr(result) == "<CheckResult check silu: PASS (4 passed, 0 failed, 1 n/a)>"
    assert str(result) == result.table()
    with pytest.raises(KeyError):
        result.row("gradcheck")


INLINE_OP = """\
#include <ATen/ATen.h>
#include <torch/library.h>

at::Tensor scale(const at::Tensor& x) { return x * 3; }

TORCH_LIBRARY(jit_check_inline, m) {
  m.def("scale(Tensor x) -> Tensor");
  m.def("bare_scale(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(jit_check_inline, CPU, m) {
  m.impl("scale", &scale);
  m.impl("bare_scale", &scale);
}
"""


@pytest.fixture(scope="module")
def inline_op(tmp_path_factory):
    """An op built by jit_loader in two versions: ``bare_scale`` has only its CPU kernel,
    ``scale`` also a fake kernel and an autograd formula registered from Python."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JIT_LOADER_CACHE", str(tmp_path_factory.mktemp("check_cache")))
        op = jit_loader.load_inline("jit_check_inline", cpp_source=INLINE_OP)
        lib = torch.library.Library("jit_check_inline", "FRAGMENT")
        torch.library.register_fake("jit_check_inline::scale", torch.empty_like, lib=lib)
        torch.library.register_autograd(
            "jit_check_inline::scale", lambda ctx, grad: torch.ops.jit_check_inline.scale(grad),
            lib=lib)
        yield op
        lib._destroy()


def test_jit_built_op_with_its_python_registrations_passes(inline_op):
    result = jit_loader.check(inline_op.scale, [(5,)], reference=lambda x: 3 * x,
                              compile_backend=BACKEND, device="cpu", verbose=False)
    assert result, result.table()
    assert result.row("opcheck").check == "opcheck jit_check_inline::scale"


@pytest.mark.filterwarnings("ignore:.*an autograd kernel was not registered:UserWarning")
def test_jit_built_op_without_registrations_fails_opcheck_and_compile(inline_op):
    result = jit_loader.check(inline_op.bare_scale, [(5,)], reference=lambda x: 3 * x,
                              compile_backend=BACKEND, device="cpu", verbose=False)
    assert result.row("reference", "float32").status == "pass"
    # No autograd kernel: autograd records the at::mul inside the CPU kernel, so the
    # gradient happens to be right, but opcheck flags the registration.
    opcheck = result.row("opcheck jit_check_inline::bare_scale")
    assert opcheck.status == "FAIL" and "test_autograd_registration" in opcheck.detail
    assert result.row("compile").status == "FAIL"  # no fake kernel


def test_help_shows_the_real_signature_and_docstring():
    import inspect
    import pydoc

    from jit_tools.tools.check import check

    assert jit_loader.check is check
    assert list(inspect.signature(jit_loader.check).parameters)[:3] == ["fn", "inputs", "reference"]
    text = pydoc.render_doc(jit_loader.check, renderer=pydoc.plaintext)
    assert "check(fn: " in text and "Check an op in one line" in text and "*args" not in text
