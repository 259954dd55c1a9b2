"""Execute notebooks in a real Jupyter kernel running this very interpreter.

The kernel spec is written into a temporary Jupyter data folder (found through
JUPYTER_PATH) with ``sys.executable`` as its interpreter, so the kernel is the
virtual environment's python whatever other kernel specs the machine has.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from subproc import ROOT, child_env

KERNEL_NAME = "jit-toolkit-tests"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@contextlib.contextmanager
def kernel_spec(data_dir: Path):
    """Install the kernel spec under ``data_dir`` and point JUPYTER_PATH at it."""
    spec = data_dir / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
    }))
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(data_dir), saved]))
    try:
        yield KERNEL_NAME
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved


def kernel_env(**extra: str) -> dict[str, str]:
    """The kernel's environment: ours, the repository importable, plus ``extra``."""
    return child_env(MPLBACKEND="Agg", **extra)


def execute(nb: nbformat.NotebookNode, *, cwd: Path, env: dict[str, str],
            timeout: int = 600) -> nbformat.NotebookNode:
    """Run every cell in order; a cell error fails unless the cell is tagged
    ``raises-exception``. Returns the notebook with its outputs."""
    client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=timeout,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    return nb


def output_text(cell) -> str:
    """Everything a cell printed, displayed or raised, as plain text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
            parts.append(f"{out.ename}: {out.evalue}")
    return _ANSI.sub("", "\n".join(parts))


def stream_text(cell, name: str) -> str:
    text = "".join(out.text for out in cell.get("outputs", [])
                   if out.output_type == "stream" and out.name == name)
    return _ANSI.sub("", text)
