"""The autograd of ops whose backward is itself an op (``jit_loader.register_autograd_op``):
served by the loader's C++ kernel at the Autograd key where its shared piece is built, by
``torch.library.register_autograd`` otherwise, with the same gradients either way; a call
that needs no grad records nothing; the registration follows the surface through reloads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import jit_loader
from jit_tools import autograd, store
from subproc import ROOT, child_env, json_result, run_python

# op folder -> the operators whose autograd it declares
DECLARED = {
    "sigmoid": ["sigmoid::forward"],
    "gelu": ["gelu::forward"],
    "resize": ["resize::forward", "resize::backward"],
    "detection": ["detection::roi_align", "detection::roi_align_backward"],
}
CPP_FILE = "jit_loader_autograd.cpp"


def autograd_kernel(qualname: str) -> str:
    """The dispatcher's line for the op's Autograd kernel ('' where it has none)."""
    lines = torch._C._dispatch_dump(qualname).splitlines()
    return next((line for line in lines if line.startswith("Autograd")), "")


def env_for(tmp_path: Path, **extra) -> dict:
    return child_env(**{"JIT_LOADER_PREBUILT": "0",
                        "JIT_LOADER_SHARED_DIR": str(store.current().shared_folder()), **extra})


@pytest.mark.parametrize("folder", sorted(DECLARED))
def test_bundled_ops_use_the_cpp_kernel(folder):
    jit_loader.load(folder)
    for qualname in DECLARED[folder]:
        assert CPP_FILE in autograd_kernel(qualname), torch._C._dispatch_dump(qualname)


def test_a_call_that_needs_no_grad_records_nothing():
    sigmoid = jit_loader.load("sigmoid").sigmoid
    x = torch.randn(8, requires_grad=True)
    assert sigmoid(x.detach()).grad_fn is None
    with torch.no_grad():
        y = sigmoid(x)
    assert y.grad_fn is None and not y.requires_grad
    y = sigmoid(x)
    assert y.grad_fn.name() == "JitLoaderAutogradBackward[sigmoid::forward]"
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.sigmoid(x) * (1 - torch.sigmoid(x)))


def test_saved_tensors_are_freed_after_backward():
    gelu = jit_loader.load("gelu").gelu
    x = torch.randn(8, requires_grad=True)
    y = gelu(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


def test_an_unused_output_grad_is_zero_as_with_register_autograd():
    # roi_align's rois need no grad and get none; an input whose output is unused gets zeros.
    detection = jit_loader.load("detection")
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 0.5, 0.5, 4.0, 4.0]], dtype=torch.float64, requires_grad=True)
    out = detection.roi_align(x, rois, 2)
    gx, grois = torch.autograd.grad(out.sum(), (x, rois), allow_unused=True)
    assert grois is None and gx.shape == x.shape


# Gradients and second derivatives of every declared op, one process per path.
GRADS = """
    import json, sys
    import torch, jit_loader

    torch.manual_seed(0)
    paths = {}
    for folder, names in json.loads(sys.argv[2]).items():
        jit_loader.load(folder)
        for name in names:
            line = next((l for l in torch._C._dispatch_dump(name).splitlines() if l.startswith("Autograd")), "")
            paths[name] = "cpp" if "jit_loader_autograd.cpp" in line else "python"
    out = {}
    def grads(name, fn, *inputs, second_order=True):
        y = fn(*inputs)
        g = torch.randn_like(y, requires_grad=second_order)
        first = torch.autograd.grad(y, inputs, g, create_graph=second_order)
        second = []
        if second_order:  # the backward of resize and roi_align is linear in g: its own backward
            w = [torch.randn_like(f) for f in first]
            second = torch.autograd.grad(sum((f * v).sum() for f, v in zip(first, w)), g)
        out[name] = [y.detach(), *first, *second]

    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    grads("sigmoid", torch.ops.sigmoid.forward, x, second_order=False)
    grads("gelu", torch.ops.gelu.forward, x, second_order=False)
    image = torch.randn(2, 3, 5, 7, dtype=torch.float64, requires_grad=True)
    grads("resize", lambda t: torch.ops.resize.forward(t, [8, 4], "half_pixel", None), image)
    grads("resize scale", lambda t: torch.ops.resize.forward(t, [10, 14], "asymmetric", [2.0, 2.0]), image)
    rois = torch.tensor([[0, 0.5, 0.5, 4.0, 3.0], [1, 1.0, 0.0, 6.0, 4.5]], dtype=torch.float64)
    grads("roi_align", lambda t: torch.ops.detection.roi_align(t, rois, 0.5, 2, 3, -1, True), image)
    torch.save(out, sys.argv[1])
    print(json.dumps(paths))
"""


def test_the_python_path_gives_the_same_gradients(tmp_path):
    env = env_for(tmp_path)
    cpp = json_result(run_python(GRADS, tmp_path / "cpp.pt", json.dumps(DECLARED), env=env))
    python = json_result(run_python(GRADS, tmp_path / "python.pt", json.dumps(DECLARED),
                                    env=dict(env, JIT_LOADER_CPP_AUTOGRAD="0")))
    assert set(cpp.values()) == {"cpp"} and set(python.values()) == {"python"}, (cpp, python)
    got, want = torch.load(tmp_path / "cpp.pt"), torch.load(tmp_path / "python.pt")
    assert got.keys() == want.keys()
    for name in got:
        for a, b in zip(got[name], want[name]):
            assert torch.equal(a, b), name


RELOAD = """
    import json, sys
    import torch, jit_loader
    from jit_tools import registry

    op = jit_loader.load(sys.argv[1])
    def kernel():
        return next((l for l in torch._C._dispatch_dump("sigmoid::forward").splitlines()
                     if l.startswith("Autograd")), "")
    out = {"first": kernel()}
    x0 = torch.randn(6, dtype=torch.float64, requires_grad=True)
    y0 = op.sigmoid(x0)                                   # a graph recorded before the reload
    registry.destroy_module_libraries(op.module)          # what a reload does first
    out["withdrawn"] = kernel()
    surface = op.path / "sigmoid.py"
    surface.write_text(surface.read_text() + "\\n# edited\\n")
    out["reloaded"] = op.reload()
    out["again"] = kernel()
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    out["gradcheck"] = torch.autograd.gradcheck(op.sigmoid, (x,))
    y0.sum().backward()
    out["old graph"] = torch.allclose(x0.grad, y0 * (1 - y0))
    print(json.dumps(out))
"""


def test_a_reload_withdraws_and_registers_the_kernel_again(tmp_path):
    copy = tmp_path / "ops" / "sigmoid"
    shutil.copytree(ROOT / "ops" / "sigmoid", copy, ignore=shutil.ignore_patterns("__pycache__", "_C*"))
    env = env_for(tmp_path, JIT_LOADER_CACHE=str(tmp_path / "cache"), CUDA_HOME=str(tmp_path / "no_cuda"))
    out = json_result(run_python(RELOAD, copy, env=env))
    assert CPP_FILE in out["first"] and out["withdrawn"] == "", out
    assert out["reloaded"] and CPP_FILE in out["again"] and out["gradcheck"], out
    assert out["old graph"], out


@pytest.mark.parametrize("args, gives, message", [
    (["grad", "z"], None, "argument 'z' names 'z', which is not an argument of sigmoid::forward"),
    (["grad"], None, "sigmoid::backward takes 2 arguments"),
    (["grad[1]", "result"], None, "argument 'grad[1]': sigmoid::forward has 1 outputs"),
    (["grad", "x.shape[x]"], None, "is not 'grad', 'result', an input name"),
    (["grad", "result"], "y", "gives names 'y', which is not an argument"),
])
def test_a_wrong_declaration_names_the_argument(args, gives, message):
    jit_loader.load("sigmoid")
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        autograd.parse("sigmoid::forward", "sigmoid::backward", args, gives)


PIECE = """
    import json, time
    from jit_tools import autograd, store
    from jit_tools.builder import process_pieces, shared
    first = autograd.cpp_library()
    root = store.current().root
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            path = process_pieces.autograd_piece(root, now=False)
            break
        except shared.Missing:
            time.sleep(1)
    print(json.dumps({"first": first is None, "built": path is not None and path.is_file()}))
"""


def test_without_shared_now_the_piece_builds_in_the_background(tmp_path):
    env = env_for(tmp_path, JIT_LOADER_SHARED_DIR=str(tmp_path / "shared"), JIT_LOADER_SHARED_NOW="0")
    out = json_result(run_python(PIECE, env=env))
    assert out == {"first": True, "built": True}


@pytest.mark.cuda
def test_forward_and_backward_capture_into_a_cuda_graph():
    # The C++ node calls the backward op on the engine's stream: nothing syncs, so a
    # training step with these ops captures (make_graphed_callables and the like).
    resize = jit_loader.load("resize").resize_bilinear
    sigmoid = jit_loader.load("sigmoid").sigmoid
    x = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)

    def step():
        (grad,) = torch.autograd.grad(sigmoid(resize(x, (16, 16))).sum(), x)
        return grad

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(captured, step())


def test_forward_mode_ad_is_refused_not_dropped():
    sigmoid = jit_loader.load("sigmoid").sigmoid
    with fwAD.dual_level():
        x = fwAD.make_dual(torch.randn(4), torch.ones(4))
        with pytest.raises(RuntimeError, match="forward-mode AD is not supported"):
            sigmoid(x)
