"""The Jupyter extension and the %%jit_op magic, driven through a real kernel.

One generated notebook plays a session: load the extension, build an op from a cell,
edit the cell and re-run it, break it, then load a file-based op, edit its header,
its Python surface and its source (a compile error, then the fix) between cells.
The notebook runs once in a kernel of this interpreter with a private build cache;
each test reads the outputs of the cells it is about.
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

# The notebook tests need Jupyter's packages (requirements.txt installs them); a GPU
# image without them skips these tests instead of failing to collect them.
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from notebook_runner import ROOT, execute, kernel_env, kernel_spec, output_text, stream_text

FIXTURE = ROOT / "tests" / "fixtures" / "toy_op"

CELL_OP = """\
#include <ATen/ATen.h>
#include <torch/library.h>

at::Tensor scale(const at::Tensor& x) {
  return x * FACTOR;
}

TORCH_LIBRARY(cellop, m) {
  m.def("scale(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(cellop, CPU, m) {
  m.impl("scale", &scale);
}
"""
BROKEN_CELL_OP = CELL_OP.replace("x * FACTOR", "x * undefined_factor")
# As Jupyter numbers the cell: line 1 is the %%jit_op line.
BROKEN_CELL_LINE = BROKEN_CELL_OP.splitlines().index("  return x * undefined_factor;") + 2

PYBIND_OP = """\
#include <pybind11/pybind11.h>

int answer() { return ANSWER; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("answer", &answer);
}
"""

SURFACE = '''\
"""Python surface of the scratch toy_op: the dispatcher op plus an offset."""
import torch

import jit_loader

jit_loader.load_library(__file__)

OFFSET = 0.0


def scaled(x):
    return torch.ops.toy_op.scale(x) + OFFSET
'''

PROGRESS = re.compile(r"building \w+: +\d+%")
TOY_LINE = (FIXTURE / "toy_op.cpp").read_text().splitlines().index("  return x * kFactor;") + 1

# (key, source, tags); the key names the cell for the tests.
CELLS = [
    ("setup", """\
        import os, sys
        from pathlib import Path
        import torch
        import jit_loader
        %load_ext jit_loader
        print("EXECUTABLE", sys.executable)
        """, []),
    ("magic_v1", "%%jit_op cellop\n" + CELL_OP.replace("FACTOR", "2"), []),
    ("call_v1", """\
        first_handle = cellop
        print("CELLOP", cellop.scale(torch.ones(3)).tolist())
        """, []),
    ("magic_rerun", "%%jit_op cellop\n" + CELL_OP.replace("FACTOR", "2"), []),
    ("magic_v2", "%%jit_op cellop\n" + CELL_OP.replace("FACTOR", "3"), []),
    ("call_v2", """\
        print("CELLOP", cellop.scale(torch.ones(3)).tolist())
        print("FIRST_HANDLE", first_handle.scale(torch.ones(3)).tolist())
        print("DISPATCHER", torch.ops.cellop.scale(torch.ones(1)).tolist())
        """, []),
    ("magic_broken", "%%jit_op cellop\n" + BROKEN_CELL_OP, ["raises-exception"]),
    ("call_after_broken", """\
        print("CELLOP", cellop.scale(torch.ones(3)).tolist())
        """, []),
    ("magic_usage", "%%jit_op\nint x;\n", ["raises-exception"]),
    ("pybind_v1", "%%jit_op pyop\n" + PYBIND_OP.replace("ANSWER", "42"), []),
    ("pybind_call_v1", 'print("PYOP", pyop.answer())', []),
    ("toy_load", """\
        scratch = Path(os.environ["SCRATCH_OP"])
        toy = jit_loader.load(scratch)
        print("TOY", toy.scaled(torch.ones(2)).tolist())
        """, []),
    ("edit_header", """\
        header = scratch / "toy_op.h"
        header.write_text(header.read_text().replace("kFactor = 2.0", "kFactor = 5.0"))
        """, []),
    ("call_after_header", 'print("TOY", toy.scaled(torch.ones(2)).tolist())', []),
    ("edit_surface", """\
        surface = scratch / "toy_op.py"
        surface.write_text(surface.read_text().replace("OFFSET = 0.0", "OFFSET = 1.0"))
        """, []),
    ("call_after_surface", 'print("TOY", toy.scaled(torch.ones(2)).tolist())', []),
    ("break_source", """\
        source = scratch / "toy_op.cpp"
        good_source = source.read_text()
        source.write_text(good_source.replace("x * kFactor;", "x * kFactr;"))
        """, []),
    ("call_after_break", 'print("TOY", toy.scaled(torch.ones(2)).tolist())', []),
    ("call_again", 'print("TOY", toy.scaled(torch.ones(2)).tolist())', []),
    ("forced_reload", "%jit_reload", ["raises-exception"]),
    ("fix_source", 'source.write_text(good_source)', []),
    ("call_after_fix", 'print("TOY", toy.scaled(torch.ones(2)).tolist())', []),
    ("unload", """\
        %unload_ext jit_loader
        header.write_text(header.read_text().replace("kFactor = 5.0", "kFactor = 7.0"))
        """, []),
    ("call_after_unload", """\
        print("TOY", toy.scaled(torch.ones(2)).tolist())
        print("MAGIC", get_ipython().find_cell_magic("jit_op"))
        """, []),
]
INDEX = {key: i for i, (key, _source, _tags) in enumerate(CELLS)}


@pytest.fixture(scope="module")
def session(once) -> nbformat.NotebookNode:
    def make(tmp: Path) -> nbformat.NotebookNode:
        scratch = tmp / "ops" / "toy_op"
        shutil.copytree(FIXTURE, scratch)
        (scratch / "toy_op.py").write_text(SURFACE)
        nb = nbformat.v4.new_notebook()
        for _key, source, tags in CELLS:
            cell = nbformat.v4.new_code_cell(textwrap.dedent(source))
            if tags:
                cell.metadata["tags"] = tags
            nb.cells.append(cell)
        env = kernel_env(JIT_LOADER_CACHE=str(tmp / "cache"), SCRATCH_OP=str(scratch))
        with kernel_spec(tmp / "jupyter"):
            return execute(nb, cwd=tmp, env=env, timeout=300)

    return once("notebook_integration", make)


def text(session, key: str) -> str:
    return output_text(session.cells[INDEX[key]])


def stderr(session, key: str) -> str:
    return stream_text(session.cells[INDEX[key]], "stderr")


def error_report(session, key: str) -> list[str]:
    """The lines of the cell's error output (what Jupyter shows in place of a traceback)."""
    cell = session.cells[INDEX[key]]
    (error,) = [out for out in cell.outputs if out.output_type == "error"]
    return output_text({"outputs": [error]}).splitlines()


def report_lines(err: str) -> list[str]:
    """stderr without the progress bar the build drew (and erased) before the report."""
    return [line for line in err.splitlines() if line.strip() and not PROGRESS.match(line)]


def test_kernel_runs_this_interpreter(session):
    assert f"EXECUTABLE {sys.executable}" in text(session, "setup")


def test_magic_builds_an_op_bound_to_its_name(session):
    assert "cellop: compiled in" in text(session, "magic_v1")
    assert "torch.ops.cellop.scale" in text(session, "magic_v1")
    assert "CELLOP [2.0, 2.0, 2.0]" in text(session, "call_v1")
    assert "cellop: unchanged" in text(session, "magic_rerun")


def test_rerunning_an_edited_cell_replaces_the_op(session):
    out = text(session, "call_v2")
    assert "CELLOP [3.0, 3.0, 3.0]" in out
    assert "FIRST_HANDLE [3.0, 3.0, 3.0]" in out
    assert "DISPATCHER [3.0]" in out


def test_compile_error_points_at_the_cell_line(session):
    report = error_report(session, "magic_broken")
    assert report[0].startswith(f"<cell cellop>:{BROKEN_CELL_LINE}: ")
    assert "undefined_factor" in report[0]
    assert any("full log: " in line and "build.log" in line for line in report)
    assert "cellop still runs its previous build" in report
    assert not any("Traceback" in line for line in report)  # the compiler's report only
    cell = session.cells[INDEX["magic_broken"]]
    assert [out.ename for out in cell.outputs if out.output_type == "error"] == ["CellBuildError"]


def test_previous_op_survives_a_failed_cell(session):
    assert "CELLOP [3.0, 3.0, 3.0]" in text(session, "call_after_broken")


def test_magic_usage_error(session):
    assert "usage: %%jit_op" in text(session, "magic_usage")


def test_magic_builds_pybind11_modules(session):
    assert "pyop.answer" in text(session, "pybind_v1")
    assert "PYOP 42" in text(session, "pybind_call_v1")


def test_hook_rebuilds_after_a_header_edit(session):
    assert "TOY [2.0, 2.0]" in text(session, "toy_load")
    out = text(session, "call_after_header")
    assert "reloaded op 'toy_op' (compiled in" in out
    assert "TOY [5.0, 5.0]" in out


def test_hook_reloads_an_edited_python_surface(session):
    out = text(session, "call_after_surface")
    assert "reloaded op 'toy_op' (Python surface only)" in out
    assert "TOY [6.0, 6.0]" in out


def test_hook_reports_a_compile_error_and_keeps_the_last_build(session):
    report = report_lines(stderr(session, "call_after_break"))
    assert re.match(rf"/\S+/toy_op\.cpp:{TOY_LINE}: .*kFactr", report[0]), report
    assert "full log: " in report[1]
    assert "this cell runs with the last good build of 'toy_op'" in report
    assert "TOY [6.0, 6.0]" in text(session, "call_after_break")


def test_hook_does_not_rebuild_an_unchanged_broken_source(session):
    report = report_lines(stderr(session, "call_again"))
    assert len(report) == 1, report
    assert "still fails to build" in report[0] and f"toy_op.cpp:{TOY_LINE}:" in report[0]
    assert "TOY [6.0, 6.0]" in text(session, "call_again")


def test_jit_reload_fails_the_cell_on_a_compile_error(session):
    report = error_report(session, "forced_reload")
    assert not stderr(session, "forced_reload")  # neither a second compile nor the hook's note
    assert re.match(rf"/\S+/toy_op\.cpp:{TOY_LINE}: ", report[0]), report
    assert "op 'toy_op' keeps its last good build" in report


def test_fixing_the_source_recovers_without_a_build(session):
    out = text(session, "call_after_fix")
    assert "op 'toy_op' builds again" in out
    assert "building" not in out
    assert "TOY [6.0, 6.0]" in out


def test_unloading_stops_the_hook_and_removes_the_magics(session):
    out = text(session, "call_after_unload")
    assert "TOY [6.0, 6.0]" in out
    assert "reloaded" not in out
    assert "MAGIC None" in out
