"""Write the notebooks of this folder from the cell sources below, without outputs.

    python notebooks/make_notebooks.py          # rewrite the .ipynb files
    python notebooks/make_notebooks.py --check  # exit 1 if a notebook differs

Edit a notebook here, not in Jupyter, so that the stored notebooks stay output-free
and reviewable; tests/test_notebooks.py executes them.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = """\
import os
from pathlib import Path

# Work in the repository root (the folder holding jit_loader.py), wherever Jupyter was
# started: IPython imports from the current folder, so jit_loader, ops and experiments
# are found as `python -m` finds them from the root.
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "jit_loader.py").is_file())
os.chdir(ROOT)

import torch
import jit_loader

device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"torch {torch.__version__}, device {device}, build cache {jit_loader.cache_dir()}")
"""
# Notebooks other than 02 load the extension with the setup: edit an op's source in
# an editor, re-run a cell, and the op is rebuilt first (02 shows it step by step).
SETUP_WITH_EXTENSION = SETUP + """
%load_ext jit_loader
"""


def md(text: str):
    return nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip())


def code(text: str):
    return nbformat.v4.new_code_cell(textwrap.dedent(text).strip())


QUICKSTART = [
    md("""
        # Quickstart: load, run, check and compare custom ops

        Every operator lives in one folder under `ops/` (C++ and CUDA sources, a Python
        surface, a plain-PyTorch reference). `jit_loader.load(name)` compiles it on first
        use, caches the build by content, and hands back a handle whose attributes are
        the op's functions, `autograd.Function`s and modules.

        The first run compiles every op (a few minutes, CUDA sources included when `nvcc`
        is installed); later runs load from the cache in well under a second. The
        notebook runs on the GPU when there is one, else on the CPU.
        """),
    code(SETUP_WITH_EXTENSION),
    md("""
        ## Load

        `available_ops()` lists the op folders. `load` returns an `Op`; `op.build` says
        whether this call compiled or came from the cache.
        """),
    code("""
        print(jit_loader.available_ops())
        sigmoid = jit_loader.load("sigmoid")
        gelu = jit_loader.load("gelu")
        lltm = jit_loader.load("lltm")
        for op in (sigmoid, gelu, lltm):
            how = "compiled" if op.build.compiled else "cached"
            print(f"{op.name:8s} {how:8s} in {op.build.seconds:5.1f} s: {op.library}")
        """),
    md("""
        ## Run, and compare with PyTorch

        The ops are ordinary differentiable PyTorch functions. `sigmoid` has a twin in
        `torch.sigmoid`; `gelu` is the sigmoid approximation `x * sigmoid(1.702 x)` of
        `F.gelu`, so it matches its own reference exactly and `F.gelu` only to about 0.02.
        """),
    code("""
        import torch.nn.functional as F
        from ops.gelu.reference import gelu_reference

        x = torch.randn(1 << 16, device=device, requires_grad=True)
        y = sigmoid.sigmoid(x)
        y.sum().backward()
        print("sigmoid  vs torch.sigmoid:", (y - torch.sigmoid(x)).abs().max().item())
        print("d/dx     vs y (1 - y):    ", (x.grad - y * (1 - y)).abs().max().item())
        g = gelu.gelu(x)
        print("gelu     vs reference:    ", (g - gelu_reference(x)).abs().max().item())
        print("gelu     vs F.gelu (erf): ", (g - F.gelu(x)).abs().max().item())
        """),
    md("""
        The LLTM cell (an LSTM-like recurrent cell from PyTorch's extension tutorial) comes
        as a function, an `autograd.Function` and an `nn.Module`. The module takes the same
        parameters as the plain-PyTorch `LLTMReference`, so the two can be compared
        directly, gradients included.
        """),
    code("""
        from ops.lltm.reference import LLTMReference

        batch, features, state = 16, 32, 128
        cell = lltm.LLTM(features, state).to(device)
        reference = LLTMReference(features, state).to(device)
        reference.load_state_dict(cell.state_dict())

        x = torch.randn(batch, features, device=device)
        h, c = torch.randn(batch, state, device=device), torch.randn(batch, state, device=device)
        new_h, new_c = cell(x, (h, c))
        ref_h, ref_c = reference(x, (h, c))
        print("new_h, new_cell vs reference:", (new_h - ref_h).abs().max().item(),
              (new_c - ref_c).abs().max().item())
        (new_h.sum() + new_c.sum()).backward()
        (ref_h.sum() + ref_c.sum()).backward()
        weight_error = (cell.weights.grad - reference.weights.grad).abs().max().item()
        print("weight gradient vs reference:", weight_error)
        """),
    md("""
        ## Check

        `jit_loader.check(fn, inputs, reference=...)` runs, in one line, the reference
        comparison in float32 and float64 (outputs and gradients), a float64
        `gradcheck`, `torch.library.opcheck` on the dispatcher ops the function calls and
        a `torch.compile(fullgraph=True)` run against eager. A shape spec such as
        `[(8, 16)]` stands for fresh random float64 inputs that require grad. The result
        is truthy when every check passed. See `03_gradcheck_and_debug` for more.
        """),
    code("""
        result = jit_loader.check(sigmoid.sigmoid, [(8, 16)], reference=torch.sigmoid)
        assert result
        """),
    code("""
        from ops.lltm.reference import example_inputs, lltm_reference

        small = example_inputs(device, torch.float64, batch=3, input_features=4, state_size=5)
        assert jit_loader.check(lltm.lltm, small, reference=lltm_reference)
        """),
    md("""
        ## How fast, next to PyTorch?

        A first look with the shared timing helper of `experiments/` (median of many runs
        after warm-up, CUDA events on a GPU). `04_benchmarks` runs the full benchmarks
        with every baseline.
        """),
    code("""
        from experiments import benchutil

        x = torch.randn(1 << 20, device=device)
        rows = []
        for name, ours, theirs in [
            ("sigmoid", sigmoid.sigmoid, torch.sigmoid),
            ("gelu", gelu.gelu, gelu_reference),
        ]:
            t_ours = benchutil.time_fn(lambda: ours(x), device, reps=20)
            t_torch = benchutil.time_fn(lambda: theirs(x), device, reps=20)
            rows.append({"op": name, "ours us": t_ours * 1e6, "PyTorch us": t_torch * 1e6,
                         "speed-up": t_torch / t_ours})
        print(benchutil.format_table(rows))
        """),
]


EDIT_AND_REBUILD = [
    md("""
        # Edit a kernel, re-run the cell, get the new kernel

        With the `jit_loader` extension loaded, every cell first checks the ops this
        kernel loaded: an edited `.cpp`, `.cu`, header or Python surface is rebuilt and
        reloaded before the cell runs, without restarting the kernel. Compile errors
        appear in the cell's output, compiler location first, and the op keeps its last
        good build, so the cell still runs (with that build).

        This notebook works on a scratch copy of `ops/sigmoid` in a temporary folder,
        without its `.cu` file so that each rebuild takes seconds on a CPU. In real use
        you edit the files in your editor; here the cells write them.
        """),
    code(SETUP),
    code("""
        %load_ext jit_loader
        """),
    code("""
        import shutil
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="jit_edit_")) / "sigmoid"
        shutil.copytree(ROOT / "ops" / "sigmoid", scratch,
                        ignore=shutil.ignore_patterns("*.cu", "*_cuda.cpp", "__pycache__"))
        kernel_source = scratch / "sigmoid.cpp"
        original_source = kernel_source.read_text()
        math_source = scratch / "sigmoid.h"  # the math the CPU and CUDA kernels share
        original_math = math_source.read_text()
        print(sorted(p.name for p in scratch.iterdir()))
        """),
    md("""
        Load the copy by its path. It registers the same `torch.ops.sigmoid` ops as the
        original, so this kernel must not also load `ops/sigmoid`.
        """),
    code("""
        op = jit_loader.load(scratch)
        x = torch.linspace(-3, 3, 7)
        print(op.sigmoid(x))
        print("max |op - torch.sigmoid|:", (op.sigmoid(x) - torch.sigmoid(x)).abs().max().item())
        """),
    md("""
        ## Edit the kernel source

        Make the forward kernel compute `sigmoid(2 x)`: one line of its math, `sigmoid.h`.
        """),
    code("""
        def edit(path, old, new):
            text = path.read_text()
            assert old in text, f"{old!r} not found in {path}"
            path.write_text(text.replace(old, new))

        edit(math_source, "return ops_common::sigmoid<kFast>(x);",
             "return ops_common::sigmoid<kFast>(T(2) * x);")
        """),
    md("""
        Re-run the same call. The extension sees the edit before the cell runs, rebuilds
        (only `sigmoid_cpu.cpp`, the CPU loops, recompiles) and swaps the new build in: the same handle `op`,
        and `torch.ops.sigmoid.forward` itself, now run the new code.
        """),
    code("""
        print(op.sigmoid(x))
        print("max |op - sigmoid(2x)|:", (op.sigmoid(x) - torch.sigmoid(2 * x)).abs().max().item())
        print("torch.ops.sigmoid.forward is the new kernel too:",
              torch.equal(torch.ops.sigmoid.forward(x), op.sigmoid(x)))
        """),
    md("""
        ## Edit the Python surface

        The op's `sigmoid.py` is watched too: add a function, and the next cell has it.
        """),
    code('''
        with open(scratch / "sigmoid.py", "a") as surface:
            surface.write("""

        def swish(x):
            return x * sigmoid(x)
        """)
        '''),
    code("""
        print(op.swish(x))
        """),
    md("""
        ## A compile error

        Introduce a typo in the kernel. The next cell reports the first compiler error as
        `file:line: message` with the path of the full log, and runs with the last good
        build (the `sigmoid(2 x)` one). Until the source changes again, later cells get a
        one-line reminder instead of a recompilation.
        """),
    code("""
        edit(kernel_source, "sigmoid_op::Forward>", "sigmoid_op::SigmoidFoward>")
        """),
    code("""
        print(op.sigmoid(x))
        """),
    md("""
        In a script, the same error is a `jit_loader.BuildError`: its first line is the
        compiler's, and it carries `file`, `line` and `log_path`.
        """),
    code("""
        try:
            op.reload()
        except jit_loader.BuildError as err:
            print("first line:", str(err).splitlines()[0])
            print(f"file {err.file}, line {err.line}")
            print("log:", err.log_path)
            print("that line:", kernel_source.read_text().splitlines()[err.line - 1].strip())
        """),
    md("""
        ## Fix it

        Correct the typo: the sources are again those of the build in use, so nothing is
        compiled.
        """),
    code("""
        edit(kernel_source, "sigmoid_op::SigmoidFoward>", "sigmoid_op::Forward>")
        """),
    code("""
        print("max |op - sigmoid(2x)|:", (op.sigmoid(x) - torch.sigmoid(2 * x)).abs().max().item())
        """),
    md("""
        Revert the kernel to the original. The cache is keyed by content, so the first
        build is reused: no compiler runs.
        """),
    code("""
        kernel_source.write_text(original_source)
        math_source.write_text(original_math)
        print("restored", kernel_source, math_source)
        """),
    code("""
        print("max |op - torch.sigmoid|:", (op.sigmoid(x) - torch.sigmoid(x)).abs().max().item())
        assert torch.allclose(op.sigmoid(x), torch.sigmoid(x))
        """),
    md("""
        `%jit_reload` runs the same check on demand (and fails the cell on a compile
        error). `%%jit_op NAME` builds an op from the C++ source in a cell; errors point at
        the cell's own lines:
        """),
    code("""
        %jit_reload
        """),
    code("""
        %%jit_op twice
        #include <ATen/ATen.h>
        #include <torch/library.h>

        at::Tensor twice(const at::Tensor& x) { return x * 2; }

        TORCH_LIBRARY(twice, m) { m.def("twice(Tensor x) -> Tensor"); }
        TORCH_LIBRARY_IMPL(twice, CPU, m) { m.impl("twice", &twice); }
        """),
    code("""
        print(twice.twice(x))
        """),
    code("""
        shutil.rmtree(scratch.parent)
        """),
]


GRADCHECK_AND_DEBUG = [
    md("""
        # Gradient checks and debugging a backward

        `jit_loader.check(fn, inputs, reference=None)` is the one-line check of an op.
        `fn` is a function, an `autograd.Function` (its `apply` is called), an `nn.Module`
        or a dispatcher op; `inputs` are sample arguments or a shape spec such as
        `[(8, 16)]` (fresh random float64 tensors that require grad). It runs:

        | check | what it catches |
        |---|---|
        | reference (float32, float64) | wrong forward; wrong backward, for one random output gradient |
        | gradcheck (float64) | backward that disagrees with finite differences; the error column is the worst Jacobian entry |
        | opcheck | a dispatcher op (found by running `fn`) with a wrong schema, fake kernel or autograd registration |
        | compile | a graph break under `torch.compile(fullgraph=True)` or a compiled result that differs from eager |

        It prints a table and returns a result that is truthy when every check passed.
        """),
    code(SETUP_WITH_EXTENSION),
    code("""
        from ops.gelu.reference import gelu_reference
        from ops.lltm.reference import example_inputs, lltm_reference
        from ops.sigmoid.reference import sigmoid_reference

        sigmoid = jit_loader.load("sigmoid")
        gelu = jit_loader.load("gelu")
        lltm = jit_loader.load("lltm")
        """),
    md("""
        ## Every op, every route

        The plain function (autograd registered with the dispatcher op), the explicit
        `autograd.Function` and the `nn.Module` of each op.
        """),
    code("""
        results = [
            jit_loader.check(sigmoid.sigmoid, [(8, 16)], reference=sigmoid_reference, device=device),
            jit_loader.check(sigmoid.SigmoidFunction, [(8, 16)], reference=sigmoid_reference, device=device),
            jit_loader.check(sigmoid.Sigmoid(), [(8, 16)], reference=torch.nn.Sigmoid(), device=device),
        ]
        """),
    code("""
        results += [
            jit_loader.check(gelu.gelu, [(8, 16)], reference=gelu_reference, device=device),
            jit_loader.check(gelu.GELUFunction, [(8, 16)], reference=gelu_reference, device=device),
            jit_loader.check(gelu.GELU(), [(8, 16)], reference=gelu_reference, device=device),
        ]
        """),
    md("""
        LLTM takes five tensors; small sizes keep the float64 Jacobians of the gradient
        check cheap.
        """),
    code("""
        small = example_inputs(device, torch.float64, batch=3, input_features=4, state_size=5)
        results += [
            jit_loader.check(lltm.lltm, small, reference=lltm_reference),
            jit_loader.check(lltm.LLTMFunction, small, reference=lltm_reference),
        ]
        """),
    code("""
        assert all(results), [r.summary() for r in results if not r]
        print(f"{len(results)} checks passed")
        """),
    md("""
        Each op's `reference.py` also declares the cases every check of it runs
        (`check_cases`, with its own tolerance table; bfloat16 included on a GPU):
        `jit_loader.check_op` runs `jit_loader.check` over them, as the tests do.
        """),
    code("""
        cases = [r for op in (sigmoid, gelu, lltm) for r in jit_loader.check_op(op, device, verbose=False)]
        for r in cases:
            print(r.summary())
        assert all(cases)
        """),
    md("""
        ## A deliberately wrong backward

        A GELU whose backward forgets the inner derivative: `d/dx sigmoid(1.702 x)` is
        `1.702 s (1 - s)`, and the factor 1.702 is missing. The forward is right, so a
        forward-only test passes; the check catches it.
        """),
    code("""
        class BuggyGELU(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.ops.gelu.forward(x)

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                s = torch.sigmoid(1.702 * x)
                return grad * (s + x * s * (1 - s))  # missing the factor 1.702 on the second term


        buggy = jit_loader.check(BuggyGELU, [(8, 16)], reference=gelu_reference, device=device)
        assert not buggy and buggy.row("gradcheck").status == "FAIL"
        """),
    md("""
        ### Finding the bug

        The forward rows pass and the gradient rows fail: the bug is in `backward`. Compare
        the analytical derivative with a central difference, element by element: the error
        is zero at `x = 0`, grows with `|x|` where `sigmoid` bends, and vanishes again
        where it saturates, which points at the `x s (1 - s)` term.
        """),
    code("""
        x = torch.linspace(-4, 4, 9, dtype=torch.float64, requires_grad=True)
        (analytical,) = torch.autograd.grad(BuggyGELU.apply(x).sum(), x)
        eps = 1e-6
        with torch.no_grad():
            numerical = (gelu.gelu(x + eps) - gelu.gelu(x - eps)) / (2 * eps)
        for xi, a, n in zip(x.tolist(), analytical.tolist(), numerical.tolist()):
            print(f"x = {xi:5.1f}   analytical {a:8.4f}   numerical {n:8.4f}   error {a - n:8.4f}")
        """),
    code("""
        class FixedGELU(BuggyGELU):
            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                s = torch.sigmoid(1.702 * x)
                return grad * (s + 1.702 * x * s * (1 - s))


        assert jit_loader.check(FixedGELU, [(8, 16)], reference=gelu_reference, device=device)
        """),
]


BENCHMARKS = [
    md("""
        # Benchmarks

        Runs the benchmark suite of `experiments/bench.py` (the same code as
        `python -m experiments.bench --quick`) on the available device: every op against
        its baselines, timed in the same run. Short sizes here (`quick` on a GPU, `tiny`
        on a CPU, a minute or two); the full suite takes at most five minutes on one GPU.
        Numbers from a CPU say little about a GPU; see `experiments/RESULTS.md` for
        recorded GPU runs.

        How it times (`experiments/benchutil.py`): CUDA events after warm-up; the median
        and interquartile range (IQR) of many repetitions; the implementations of a case
        interleaved, so a slow spell of the machine hits all of them; an L2 flush between
        calls of memory-bound cases; host-bound cases also by wall clock. It warns when the
        machine is loaded or a spread is wide.
        """),
    code(SETUP_WITH_EXTENSION),
    code("""
        import tempfile

        from IPython.display import Image, Markdown, display

        from experiments import bench

        out_dir = Path(tempfile.mkdtemp(prefix="bench_"))
        scale = "quick" if device == "cuda" else "tiny"
        doc = bench.run_suite(device, scale, out_dir=out_dir)
        print(f"{doc['cases']} cases, {len(doc['records'])} records in {doc['elapsed_s']:.0f} s")
        for warning in doc["warnings"]:
            print("warning:", warning)
        print("files:", *sorted(p.name for p in out_dir.iterdir()))
        """),
    md("""
        ## Ratio to each baseline

        One bar per case (pass, size, dtype) and baseline: baseline time over ours, on a
        log axis, so 2 and 0.5 are equally far from the line at 1. Right of the line our op
        is faster. A tick marks the target of the op's issue: green where met, red where
        missed. The baseline `clone() of the same bytes` copies as many bytes as the case
        moves: its ratio is our fraction of the copy bandwidth.
        """),
    code("""
        display(Image(filename=out_dir / "ratios.png"))
        """),
    md("""
        ## Achieved bandwidth

        The memory-bound ops (sigmoid, GELU, resize, scatter) move a known number of bytes per call: here
        their GB/s, next to `clone()` moving the same bytes and to the copy ceiling (a
        large `clone()`), all from this run. Small sizes cannot reach the ceiling: a
        launch costs microseconds whatever the size.
        """),
    code("""
        display(Image(filename=out_dir / "bandwidth.png"))
        """),
    md("""
        ## Summary

        The same summary the command line prints and writes to `summary.md`; `bench.json`
        holds one record per case and baseline (fields in `benchutil.RECORD_FIELDS`).
        """),
    code("""
        display(Markdown((out_dir / "summary.md").read_text()))
        """),
    md("""
        ## Timing your own function

        `benchutil.measure` is the suite's timer, for any set of callables: interleaved,
        median and IQR per implementation.
        """),
    code("""
        from experiments import benchutil

        sigmoid = jit_loader.load("sigmoid")
        x = torch.randn(1 << 20, device=device)
        timings = benchutil.measure({"ours": lambda: sigmoid.sigmoid(x),
                                     "torch.sigmoid": lambda: torch.sigmoid(x)},
                                    device, budget_s=0.2, flush=True)
        for name, t in timings.items():
            print(f"{name:14s} {t.median * 1e6:8.1f} us  (IQR {t.iqr * 1e6:.1f} us, {t.reps} reps)")
        """),
]


def cells_of(module_file: str) -> list:
    """The cells a module beside this one lists as (kind, source): md, code, or setup."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(Path(module_file).stem, HERE / module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = {"md": md, "code": code, "setup": lambda _: code(SETUP_WITH_EXTENSION)}
    return [made[kind](source) for kind, source in module.CELLS]


NOTEBOOKS = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_edit_and_rebuild.ipynb": EDIT_AND_REBUILD,
    "03_gradcheck_and_debug.ipynb": GRADCHECK_AND_DEBUG,
    "04_benchmarks.ipynb": BENCHMARKS,
    "05_debug_and_profile.ipynb": cells_of("cells_debug_and_profile.py"),
}


def build(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(cells):
        cell = nbformat.from_dict(dict(cell))
        cell["id"] = f"cell-{i:02d}"  # stable ids: regenerating changes nothing
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name, cells in NOTEBOOKS.items():
        text = nbformat.writes(build(cells)) + "\n"
        path = HERE / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python notebooks/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
