"""The LLTM op, specified by tests against the pure-PyTorch reference (ops/lltm/reference.py).

Every comparison evaluates the reference in float64 on the very values the op received,
so the tolerance table below is the op's own accuracy in each dtype.
"""

from __future__ import annotations

import json

import pytest
import torch

import jit_loader
from jit_tools.tools.testing import OpTester
from ops.lltm.reference import (TOLERANCES, LLTMReference, example_inputs, lltm_reference,
                                reset_parameters)
from subproc import child_env, run_python

TOL = TOLERANCES
DTYPES = list(TOL)

# (batch, input_features, state_size): the tutorial's size, batch 1, sizes that are not
# multiples of the CUDA block (32 features x 8 rows), batches past one block row of
# the bias reduction (64). On CUDA the route depends on the multiply-adds
# (batch x 3 state x (state + features)) against the crossover (2^25, lltm_cuda.h): the
# middle size 64 x 128 x 256 (19M) takes the one-launch kernels both ways; 96 x 128 x 320
# (41M) the cuBLAS route, with the bias gradient's partial sums; 300 x 8 x 24 the
# one-launch forward and, past 256 rows, the pointwise backward with GEMMs.
SHAPES = [(16, 32, 128), (1, 32, 128), (1, 1, 1), (7, 5, 33), (65, 17, 40), (130, 3, 70),
          (48, 64, 160), (64, 128, 256), (96, 128, 320), (300, 8, 24)]

NAMES = ("input", "weights", "bias", "old_h", "old_cell")


@pytest.fixture(scope="module")
def op():
    return jit_loader.load("lltm")


def _grad_outputs(new_h):
    return [torch.randn_like(new_h), torch.randn_like(new_h)]


def _reference(inputs, grad_outputs):
    """Forward outputs and the five input gradients of the float64 reference."""
    ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
    out = lltm_reference(*ref_inputs)
    grads = torch.autograd.grad(out, ref_inputs, [g.double() for g in grad_outputs])
    return [o.detach() for o in out], list(grads)


def _assert_matches_reference(fn, inputs, dtype, grad_outputs=None):
    out = fn(*inputs)
    grad_outputs = grad_outputs if grad_outputs is not None else _grad_outputs(out[0])
    grads = torch.autograd.grad(out, inputs, grad_outputs)
    ref_out, ref_grads = _reference(inputs, grad_outputs)
    for name, got, want in zip(("new_h", "new_cell"), out, ref_out):
        assert got.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got.double(), want, **TOL[dtype], msg=lambda m: f"{name}: {m}")
    for name, got, want in zip(NAMES, grads, ref_grads):
        assert got.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got.double(), want, **TOL[dtype],
                                   msg=lambda m: f"grad of {name}: {m}")


# --- values ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_and_all_gradients_match_reference(op, device, dtype, shape):
    torch.manual_seed(sum(shape))
    inputs = example_inputs(device, dtype, *shape)
    _assert_matches_reference(op.lltm, inputs, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_strided_and_broadcast_inputs(op, device, dtype):
    batch, features, state = 9, 6, 37
    kw = dict(device=device, dtype=dtype)
    bound = state ** -0.5
    leaves = [
        torch.randn(batch, 2 * features, **kw),                      # every other column
        torch.randn(features + state, 3 * state, **kw) * bound,      # transposed weights
        torch.randn(6 * state, **kw) * bound,                        # every other element
        torch.randn(state, batch, **kw),                             # column-major old_h
        torch.randn(1, state, **kw),                                 # old_cell broadcast
    ]
    for t in leaves:
        t.requires_grad_()
    inputs = (leaves[0][:, ::2], leaves[1].t(), leaves[2][::2], leaves[3].t(),
              leaves[4].expand(batch, state))
    assert not any(t.is_contiguous() for t in inputs)
    grad_outputs = [torch.randn(state, batch, **kw).t(),             # strided grad_h
                    torch.randn((), **kw).expand(batch, state)]      # zero-stride grad_cell
    _assert_matches_reference(op.lltm, inputs, dtype, grad_outputs)


def _errors(fn, inputs, grad_outputs):
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_outputs)
    ref_out, ref_grads = _reference(inputs, grad_outputs)
    return [(got.double() - want).abs().max().item()
            for got, want in zip([*out, *grads], [*ref_out, *ref_grads])]


def test_saturated_gates_and_nan_propagation(op, device):
    """Pre-activations in the hundreds saturate every gate. Derivatives of saturated gates
    round to 0 in float32 (as in PyTorch's own sigmoid backward), and hx in the hundreds
    amplifies that in the weight gradient, so the op is held to the float32 reference's
    own error. A NaN in the input gives NaN exactly where the reference has it."""
    torch.manual_seed(0)
    inputs = [t.detach() for t in example_inputs(device, torch.float32, 8, 12, 40)]
    inputs[0] = inputs[0] * 200
    inputs[3] = inputs[3] * 200
    inputs = [t.requires_grad_() for t in inputs]
    grad_outputs = _grad_outputs(inputs[3])
    for name, err, eager_err in zip(("new_h", "new_cell", *NAMES),
                                    _errors(op.lltm, inputs, grad_outputs),
                                    _errors(lltm_reference, inputs, grad_outputs)):
        assert err <= 2 * eager_err + 1e-6, (name, err, eager_err)

    with torch.no_grad():
        inputs[0][2, 3] = float("nan")
        new_h, new_cell = op.lltm(*inputs)
        ref_h, ref_cell = lltm_reference(*inputs)
    assert torch.equal(new_h.isnan(), ref_h.isnan()) and new_h.isnan().any()
    assert torch.equal(new_cell.isnan(), ref_cell.isnan())


def test_only_new_h_used(op, device):
    """An output left out of the loss gets no gradient buffer; the result is unchanged."""
    torch.manual_seed(1)
    inputs = example_inputs(device, torch.float64, 5, 4, 9)
    got = torch.autograd.grad(op.lltm(*inputs)[0].sum(), inputs)
    want = torch.autograd.grad(lltm_reference(*inputs)[0].sum(), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL[torch.float64])


# Masks of the backward op: each gradient alone, the tutorial's (parameters only) and none.
# On CUDA a small cell's backward allocates and writes only the gradients asked for, and its
# d_gates only for the input and old_h GEMMs.
MASKS = [[i == k for i in range(5)] for k in range(5)] + [[False, True, True, False, False],
                                                          [False] * 5]


@pytest.mark.parametrize("shape", [(16, 32, 128), (3, 2, 5), (0, 3, 4), (300, 4, 8),
                                   (64, 128, 256), (96, 128, 320)],
                         ids=lambda s: "x".join(map(str, s)))
def test_backward_op_output_masks(op, device, shape):
    """Every output mask of lltm.backward, on small cells, the middle size, a batch past the
    small backward's rows, and a cell past its multiply-adds: what the mask asks for matches
    the float64 reference, and nothing else is returned."""
    torch.manual_seed(sum(shape))
    inputs = [t.detach() for t in example_inputs(device, torch.float32, *shape)]
    new_h, new_cell, gates, hx = torch.ops.lltm.forward(*inputs)
    grad_outputs = _grad_outputs(new_h)
    _, want = _reference(inputs, grad_outputs)
    for mask in MASKS:
        got = torch.ops.lltm.backward(*grad_outputs, new_cell, gates, hx, inputs[1], mask)
        for name, needed, g, w in zip(NAMES, mask, got, want):
            if not needed:
                assert g is None, (mask, name)
                continue
            torch.testing.assert_close(g.double(), w, **TOL[torch.float32],
                                       msg=lambda m: f"mask {mask}, grad of {name}: {m}")


# --- the backward node (LLTMBackward): autograd's contracts -----------------------------------
# The node is the same for every device; these run on the CPU.


def test_steps_backpropagate_through_time(op):
    """Twelve steps, each step's state the next one's input: gradients of the parameters and
    of the initial state through all of them, against the reference unrolled alike."""
    torch.manual_seed(13)
    inputs = example_inputs("cpu", torch.float64, 3, 4, 5)
    xs = torch.randn(12, 3, 4, dtype=torch.float64)

    def unroll(cell, x0, weights, bias, h, c):
        for x in (x0, *xs):
            h, c = cell(x, weights, bias, h, c)
        return h.sum() + c.square().sum()

    got = torch.autograd.grad(unroll(op.lltm, *inputs), inputs)
    want = torch.autograd.grad(unroll(lltm_reference, *inputs), inputs)
    for name, g, w in zip(NAMES, got, want):
        torch.testing.assert_close(g, w, **TOL[torch.float64], msg=lambda m: f"{name}: {m}")


def test_second_backward_needs_retain_graph(op):
    inputs = example_inputs("cpu", torch.float64, 2, 3, 4)
    loss = sum(t.sum() for t in op.lltm(*inputs))
    loss.backward(retain_graph=True)
    first = [t.grad.clone() for t in inputs]
    loss.backward()  # the saved tensors were kept: the gradients add up
    for t, g in zip(inputs, first):
        torch.testing.assert_close(t.grad, 2 * g)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_saved_tensor_changed_in_place_is_caught(op):
    """The node saves the weights; writing into them before backward fails autograd's
    version check instead of giving a wrong gradient."""
    inputs = list(example_inputs("cpu", torch.float64, 2, 3, 4))
    weights = inputs[1] * 1  # not a leaf, so it may be written in place
    new_h, new_cell = op.lltm(inputs[0], weights, *inputs[2:])
    with torch.no_grad():
        weights.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (new_h.sum() + new_cell.sum()).backward()


def test_long_chain_of_steps_is_freed(op):
    """A hundred thousand steps chain as many nodes; dropping the last state frees them all.
    Nodes are deleted iteratively, not by a recursion as deep as the chain: with torch 2.11's
    shared_ptr nodes and a plain deleter this chain's teardown overflows the stack."""
    inputs = example_inputs("cpu", torch.float32, 1, 1, 1)
    x, weights, bias, h, c = inputs
    for _ in range(100000):
        h, c = op.lltm(x, weights, bias, h, c)
    assert h.grad_fn is not None and h.grad_fn.name() == "LLTMBackward"
    del h, c  # a recursive teardown of this chain would overflow the stack


# --- the three Python entry points ---------------------------------------------------------


def test_autograd_function_with_one_output_used(op, device):
    """The autograd.Function when only new_cell reaches the loss (its agreement with the
    reference when both do is the op tester's check)."""
    torch.manual_seed(3)
    inputs = example_inputs(device, torch.float64, 6, 10, 20)
    got = torch.autograd.grad(op.LLTMFunction.apply(*inputs)[1].sum(), inputs)
    want = torch.autograd.grad(lltm_reference(*inputs)[1].sum(), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL[torch.float64])


def test_module_has_reference_parameters_and_outputs(op, device):
    torch.manual_seed(4)
    cell = op.LLTM(12, 24).to(device)
    torch.manual_seed(4)
    ref = LLTMReference(12, 24).to(device)
    assert [n for n, _ in cell.named_parameters()] == ["weights", "bias"]
    for (name, p), q in zip(cell.named_parameters(), ref.parameters()):
        assert p.shape == q.shape and torch.equal(p, q), name
        assert p.abs().max() <= 24 ** -0.5
    x = torch.randn(3, 12, device=device)
    state = (torch.randn(3, 24, device=device), torch.randn(3, 24, device=device))
    (h, c), (rh, rc) = cell(x, state), ref(x, state)
    torch.testing.assert_close(h, rh, **TOL[torch.float32])
    torch.testing.assert_close(c, rc, **TOL[torch.float32])
    (h.sum() + c.sum()).backward()
    (rh.sum() + rc.sum()).backward()
    for p, q in zip(cell.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL[torch.float32])


def test_reset_parameters_bound():
    weights, bias = torch.empty(3 * 100, 150), torch.empty(3 * 100)
    reset_parameters(weights, bias)
    for t in (weights, bias):
        assert t.abs().max() <= 0.1 and t.abs().max() > 0.09


# --- PyTorch machinery: the op tester's checks, the module compiled, TorchScript ----------------


class TestLLTM(OpTester):
    """The op tester's checks of the function and the autograd.Function, of the parameters'
    gradients alone, and of an empty batch: reference.check_cases."""
    op_name = "lltm"


def test_module_compiles_fullgraph(op):
    """The nn.Module, its parameters inside the graph (the function alone is the op
    tester's compile check)."""
    torch._dynamo.reset()
    torch.manual_seed(5)
    cell = op.LLTM(6, 10)
    compiled_cell = torch.compile(cell, fullgraph=True)
    x, h, c = torch.randn(8, 6), torch.randn(8, 10), torch.randn(8, 10)
    got, want = compiled_cell(x, (h, c)), cell(x, (h, c))
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got[0].sum() + got[1].sum(), cell.weights)
    (w,) = torch.autograd.grad(want[0].sum() + want[1].sum(), cell.weights)
    torch.testing.assert_close(g, w)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_torchscript(op, device):
    @torch.jit.script
    def scripted(input, weights, bias, old_h, old_cell):
        new_h, new_cell, gates, hx = torch.ops.lltm.forward(input, weights, bias, old_h, old_cell)
        return new_h, new_cell

    torch.manual_seed(7)
    inputs = example_inputs(device, torch.float32, 4, 5, 6)
    _assert_matches_reference(scripted, inputs, torch.float32)

    cell = torch.jit.script(op.LLTM(5, 6).to(device))
    x, state = inputs[0].detach(), (inputs[3].detach(), inputs[4].detach())
    h, c = cell(x, state)
    torch.testing.assert_close(h, lltm_reference(x, cell.weights, cell.bias, *state)[0])
    (h.sum() + c.sum()).backward()
    assert cell.weights.grad is not None and cell.bias.grad is not None


# --- bad input ------------------------------------------------------------------------------


def _bad(device, **changes):
    inputs = dict(zip(NAMES, example_inputs(device, torch.float32, 4, 3, 5, requires_grad=False)))
    inputs.update(changes)
    return [inputs[n] for n in NAMES]


BAD_INPUTS = {
    "input rank": (dict(input=torch.randn(4, 3, 1)), r"input must be a 2-D tensor, got 3-D"),
    "weights rank": (dict(weights=torch.randn(15)), r"weights must be a 2-D tensor, got 1-D"),
    "bias rank": (dict(bias=torch.randn(15, 1)), r"bias must be a 1-D tensor, got 2-D"),
    "weights shape": (dict(weights=torch.randn(15, 9)),
                      r"weights must have shape \(3 \* state_size, state_size \+ input_features\) "
                      r"= \(15, 8\) .* got \[15, 9\]"),
    "bias shape": (dict(bias=torch.randn(14)),
                   r"bias must have shape \(3 \* state_size\) = \(15\) .* got \[14\]"),
    "old_h batch": (dict(old_h=torch.randn(3, 5)), r"old_h.size\(0\) must be 4, got 3"),
    "old_cell shape": (dict(old_cell=torch.randn(4, 6)),
                       r"old_cell must have the shape of old_h \[4, 5\], got \[4, 6\]"),
    "integer input": (dict(input=torch.ones(4, 3, dtype=torch.long)),
                      r"input must be a floating-point tensor, got Long"),
    "integer weights": (dict(weights=torch.ones(15, 8, dtype=torch.int32)),
                        r"weights has dtype Int but input has dtype Float"),
    "mixed float dtypes": (dict(old_cell=torch.randn(4, 5, dtype=torch.float64)),
                           r"old_cell has dtype Double but input has dtype Float"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_names_argument_and_value(op, device, case):
    changes, message = BAD_INPUTS[case]
    inputs = _bad(device, **{name: t.to(device) for name, t in changes.items()})
    with pytest.raises(RuntimeError, match=message):
        op.lltm(*inputs)


def test_fake_kernels_reject_meta_mixed_with_cpu(op):
    inputs = _bad("cpu")
    inputs[4] = inputs[4].to("meta")
    with pytest.raises(RuntimeError, match=r"lltm.forward: old_cell is on meta but input is on cpu"):
        torch.ops.lltm.forward(*inputs)
    new_h, new_cell, gates, hx = torch.ops.lltm.forward(*_bad("cpu"))
    with pytest.raises(RuntimeError, match=r"lltm.backward: grad_cell is on meta but new_cell is on cpu"):
        torch.ops.lltm.backward(torch.ones_like(new_h), torch.ones_like(new_cell, device="meta"),
                                new_cell, gates, hx, _bad("cpu")[1], [True] * 5)


@pytest.mark.cuda
def test_inputs_on_different_devices(op):
    inputs = _bad("cuda")
    inputs[1] = inputs[1].cpu()
    with pytest.raises(RuntimeError, match=r"lltm.forward: weights is on cpu but input is on cuda:0"):
        op.lltm(*inputs)
    inputs = _bad("cpu")
    inputs[3] = inputs[3].cuda()
    with pytest.raises(RuntimeError, match=r"lltm.forward: old_h is on cuda:0 but input is on cpu"):
        op.lltm(*inputs)


@pytest.mark.cuda
def test_cuda_matches_cpu_on_large_batch(op):
    """Batches past one block row use per-block partial sums for the bias gradient."""
    torch.manual_seed(8)
    cpu = example_inputs("cpu", torch.float64, 1000, 40, 96)
    cuda = [t.detach().cuda().requires_grad_() for t in cpu]
    go = [torch.randn(1000, 96, dtype=torch.float64) for _ in range(2)]
    got = torch.autograd.grad(op.lltm(*cuda), cuda, [g.cuda() for g in go])
    want = torch.autograd.grad(op.lltm(*cpu), cpu, go)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, **TOL[torch.float64])


# The CUDA route of each shape, by the kernels it launches: the one-launch forward or not.
ROUTE_CODE = """
import json
import torch
import jit_loader
from ops.lltm.reference import TOLERANCES, example_inputs, lltm_reference
op = jit_loader.load("lltm")
routes = {}
for shape in ([16, 32, 128], [64, 128, 256]):
    torch.manual_seed(sum(shape))
    inputs = example_inputs("cuda", torch.float32, *shape)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = op.lltm(*inputs)
        torch.cuda.synchronize()
    cotangents = [torch.randn_like(out[0]), torch.randn_like(out[0])]
    got = [*out, *torch.autograd.grad(out, inputs, cotangents)]
    ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
    ref_out = lltm_reference(*ref_inputs)
    want = [*ref_out, *torch.autograd.grad(ref_out, ref_inputs, [g.double() for g in cotangents])]
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, **TOLERANCES[torch.float32])
    routes["x".join(map(str, shape))] = any("forward_small" in e.name for e in prof.events())
print(json.dumps(routes))
"""


@pytest.mark.cuda
@pytest.mark.parametrize("macs, one_launch", [("0", False), ("100000000", True),
                                              ("", True)], ids=["0", "1e8", "unset"])
def test_crossover_override_picks_the_route(op, macs, one_launch):
    """LLTM_SMALL_MACS moves the crossover between the one-launch kernels and the cuBLAS
    route (read once per process, hence a new one each): at 0 no cell takes the one-launch
    forward, at 1e8 and by default the tutorial's and the middle size do; every route
    matches the reference."""
    proc = run_python(ROUTE_CODE, env=child_env(LLTM_SMALL_MACS=macs))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"16x32x128": one_launch,
                                                      "64x128x256": one_launch}


@pytest.mark.cuda
def test_crossover_override_rejects_a_bad_value(op):
    code = ("import torch, jit_loader\nfrom ops.lltm.reference import example_inputs\n"
            "jit_loader.load('lltm').lltm(*example_inputs('cuda'))")
    proc = run_python(code, env=child_env(LLTM_SMALL_MACS="2e6"))
    assert proc.returncode != 0
    assert "LLTM_SMALL_MACS must be a count of multiply-adds (an integer >= 0), got '2e6'" \
        in proc.stderr
