"""The notebooks: stored without outputs, in sync with their generator, and runnable.

Each notebook is executed top to bottom in a Jupyter kernel of this interpreter (on the
GPU where there is one). They load the real ops through the default build cache
(JIT_LOADER_CACHE if set), which they share with the op tests: a cold cache compiles
every op first, CUDA sources included when nvcc is installed.
"""

from __future__ import annotations

import importlib.util

import pytest

# The notebook tests need Jupyter's packages (requirements.txt installs them); a GPU
# image without them skips these tests instead of failing to collect them.
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from notebook_runner import ROOT, execute, kernel_env, kernel_spec, output_text

NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = ["01_quickstart.ipynb", "02_edit_and_rebuild.ipynb", "03_gradcheck_and_debug.ipynb",
             "04_benchmarks.ipynb", "05_debug_and_profile.ipynb"]


def _generator():
    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOK_DIR / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebooks_match_their_generator():
    make_notebooks = _generator()
    assert sorted(make_notebooks.NOTEBOOKS) == NOTEBOOKS
    assert make_notebooks.main(["--check"]) == 0


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_leaves_sys_path_alone(name):
    """As the README says of scripts and tests: they work from the repository root."""
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert "sys.path" not in code and "os.chdir(ROOT)" in code


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name):
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_spec(tmp_path_factory.mktemp("jupyter")):
        yield


def run(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    return execute(nb, cwd=NOTEBOOK_DIR, env=kernel_env(), timeout=1200)  # a cold cache compiles every op


def outputs(nb) -> str:
    return "\n".join(output_text(cell) for cell in nb.cells if cell.cell_type == "code")


# The notebooks whose outcome is the verdicts of jit_loader.check they print.
CHECK_VERDICTS = {
    "01_quickstart.ipynb": ["check sigmoid: PASS", "check lltm: PASS"],
    "03_gradcheck_and_debug.ipynb": ["check BuggyGELU: FAIL", "check FixedGELU: PASS"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECK_VERDICTS)
def test_check_verdicts(kernel, name):
    out = outputs(run(name))
    for verdict in CHECK_VERDICTS[name]:
        assert verdict in out, verdict


@pytest.mark.slow
def test_edit_and_rebuild(kernel):
    nb = run("02_edit_and_rebuild.ipynb")
    out = outputs(nb)
    assert "jit_loader: reloaded op 'sigmoid' (compiled in" in out
    assert "jit_loader: reloaded op 'sigmoid' (Python surface only)" in out
    assert "sigmoid.cpp:" in out and "SigmoidFoward" in out
    assert "this cell runs with the last good build of 'sigmoid'" in out
    assert "op 'sigmoid' builds again" in out
    assert "jit_loader: reloaded op 'sigmoid' (loaded from the build cache)" in out


@pytest.mark.slow
def test_benchmarks(kernel):
    nb = run("04_benchmarks.ipynb")
    images = [out for cell in nb.cells for out in cell.get("outputs", [])
              if "image/png" in out.get("data", {})]
    assert len(images) == 2


@pytest.mark.slow
def test_debug_and_profile(kernel):
    import torch
    out = outputs(run("05_debug_and_profile.ipynb"))
    assert "squash works on" in out and "planted at squash_cuda.cu:" in out
    assert "check_finite: squash::forward: result 0" in out and "is inf" in out
    assert "debug build" in out and "the fixed kernel runs:" in out
    if not torch.cuda.is_available():
        assert "skipped: no CUDA GPU here" in out
    elif "skipped:" not in out:  # a GPU with compute-sanitizer and ncu
        planted = next(l for l in out.splitlines() if l.startswith("planted at ")).split(":")[1]
        assert f"Invalid __global__ write at " in out and f"squash_cuda.cu:{planted}" in out
        assert "compute-sanitizer memcheck: clean, nothing found" in out
        assert "compute-sanitizer racecheck: clean, nothing found" in out
        assert "of the copy's speed" in out
