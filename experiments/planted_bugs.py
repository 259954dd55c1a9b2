"""Bugs planted into a scaffolded CUDA op (``python -m jit_loader new NAME --cuda``), for the
sanitizer's tests, experiments/debug_tools_check.py and the debugging notebook: each edit
returns the lines it planted, where a report must point.

* ``oob``: the forward kernel writes ``y[i + 1]``: one element past the output;
* ``race``: the forward kernel passes each value through shared memory and reads a
  neighbour's slot with no ``__syncthreads()`` between the write and the read.
"""

from __future__ import annotations

from pathlib import Path

FORWARD_BODY = "y[i] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));"
STRIDE = "  const int64_t stride = int64_t(blockDim.x) * gridDim.x;"
OOB_BODY = "y[i + 1] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));"
RACE_BODY = ("tile[threadIdx.x] = ops_common::to_acc(x[i]);\n"
             "    y[i] = ops_common::from_acc<T>(forward(tile[(threadIdx.x + 32) % blockDim.x]));")
TILE = "  __shared__ float tile[1024];  // one slot per thread\n"


def kernel_file(op_dir: Path) -> Path:
    return Path(op_dir) / f"{Path(op_dir).name}_cuda.cu"


def _line_of(text: str, fragment: str) -> int:
    return text[:text.index(fragment)].count("\n") + 1


def plant(op_dir: Path, kind: str) -> dict[str, int]:
    """Plant ``kind`` (oob, race) into the op's forward kernel; the planted lines by role
    (``write``, and ``read`` for a race)."""
    cu = kernel_file(op_dir)
    text = cu.read_text()
    if FORWARD_BODY not in text or STRIDE not in text:
        raise ValueError(f"{cu} does not hold the scaffold's forward kernel")
    if kind == "oob":
        text = text.replace(FORWARD_BODY, OOB_BODY, 1)
        cu.write_text(text)
        return {"write": _line_of(text, OOB_BODY)}
    if kind == "race":
        text = text.replace(STRIDE, TILE + STRIDE, 1).replace(FORWARD_BODY, RACE_BODY, 1)
        cu.write_text(text)
        write = _line_of(text, RACE_BODY)
        return {"write": write, "read": write + 1}
    raise ValueError(f"unknown bug {kind!r}: oob or race")


def fix(op_dir: Path) -> None:
    """Undo either plant: the scaffold's forward kernel again."""
    cu = kernel_file(op_dir)
    text = cu.read_text().replace(TILE, "").replace(OOB_BODY, FORWARD_BODY).replace(RACE_BODY, FORWARD_BODY)
    cu.write_text(text)
