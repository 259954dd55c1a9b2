"""``jit_loader.sanitize(fn, *args, tool="memcheck")``: one call of an op under
compute-sanitizer, in a fresh process, with the op's debug build, reported against the op's
own source lines.

The call runs in a new Python process (jit_tools/tools/fresh_call.py) so that this one,
a notebook kernel say, never runs under the tool and survives what the call does; the debug
build (host -O0 -g, device line info, OPS_DEBUG) is built first, outside the tool. The
process runs with PyTorch's caching allocator off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``):
with it on, an out-of-bounds access usually lands in another block of the same cached
segment, which the tool cannot tell from a valid one, and expandable segments give false
reports. compute-sanitizer follows only that process (``--target-processes
application-only``), names full paths (``--strip-paths no``), and its text output is parsed
(jit_tools/tools/sanitizer_report.py).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from jit_tools.tools import fresh_call, nvtools, sanitizer_report
from jit_tools.tools.sanitizer_report import SanitizerReport

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
DEFAULT_TIMEOUT = 600.0


def _check_tool(tool: str) -> None:
    if tool not in TOOLS:
        raise ValueError(f"sanitize: tool must be one of {', '.join(TOOLS)}, got {tool!r}")


def _allocator_conf() -> str | None:
    """PYTORCH_CUDA_ALLOC_CONF without expandable segments (None when nothing is left)."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    kept = [item for item in conf.split(",") if item.strip() and
            not item.strip().replace(" ", "").startswith("expandable_segments")]
    return ",".join(kept) or None


def command(exe: str, tool: str, spec: Path, print_limit: int) -> list[str]:
    """The compute-sanitizer command line for a spec of calls. The tool talks to the
    process it follows through one of ten ports from ``--port``; a base drawn at random
    lets many runs go side by side (test workers, experiments/sanitize_all.py)."""
    port = random.randrange(20000, 60000, 16)
    return [exe, "--tool", tool, "--target-processes", "application-only", "--strip-paths", "no",
            "--print-limit", str(print_limit), "--error-exitcode", "3", "--port", str(port),
            sys.executable, "-m", "jit_tools.tools.fresh_call", str(spec)]


def sanitize(fn, *args, tool: str = "memcheck", backward: bool | None = None,
             kwargs: dict | None = None, print_limit: int = 100,
             timeout: float = DEFAULT_TIMEOUT) -> SanitizerReport:
    """Run ``fn(*args, **kwargs)`` (and its backward, see below) once in a fresh process
    under compute-sanitizer's ``tool`` (memcheck, racecheck, initcheck or synccheck) with
    the debug build of the op it belongs to; returns what the tool found.

    ``fn`` is a function of an op (``op.my_op``), a dispatcher op (``torch.ops.ns.name``)
    or a function importable by module and name; the arguments travel with
    ``torch.save``, CUDA tensors to the same device. ``backward`` None: the backward of the
    result runs too (a gradient of ones) where an argument requires grad. The report's
    ``clean`` says whether anything was found; in Jupyter it shows each finding with the
    op's source line. Raises ToolMissing without compute-sanitizer, JitLoaderError without a
    GPU, BuildError when the debug build fails, ToolTimeout past ``timeout`` seconds."""
    _check_tool(tool)
    target, ops = fresh_call.describe(fn, "sanitize")
    kwargs = dict(kwargs or {})
    label = fresh_call.label_of(fn)
    call = fresh_call.Call(label=str(label), target=target, args=tuple(args), kwargs=kwargs,
                           backward=fresh_call.wants_backward(args, kwargs, backward))
    return run_calls([call], ops, tool, print_limit=print_limit, timeout=timeout)


def run_calls(calls: Sequence[fresh_call.Call], ops: Sequence[Path], tool: str = "memcheck",
              *, print_limit: int = 100, timeout: float = DEFAULT_TIMEOUT) -> SanitizerReport:
    """``calls`` in one fresh process under ``tool``, with debug builds of ``ops``."""
    _check_tool(tool)
    exe = nvtools.find("compute-sanitizer", "jit_loader.sanitize")
    nvtools.needs_gpu("jit_loader.sanitize")
    options = nvtools.op_options(ops, debug=True)
    started = time.perf_counter()
    nvtools.ensure_built(options, "sanitize", timeout)
    with tempfile.TemporaryDirectory(prefix="jit_loader_sanitize_") as tmp:
        spec = fresh_call.write_spec(Path(tmp), calls, ops, options, "run")
        argv = command(exe, tool, spec, print_limit)
        env = nvtools.child_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1",
                                PYTORCH_CUDA_ALLOC_CONF=_allocator_conf(), JIT_LOADER_DEBUG="1")
        left = max(1.0, timeout - (time.perf_counter() - started))
        proc = nvtools.run_tool(argv, env, left, f"sanitize ({tool})")
        result = fresh_call.read_result(spec)
    report = sanitizer_report.parse(tool, proc.stdout, ops)
    report.command = argv
    report.seconds = time.perf_counter() - started
    report.calls = [c.label for c in calls]
    if result.get("error"):
        where = f" (in {result['current']})" if result.get("current") else ""
        report.call_error = result["error"].splitlines()[0] + where
    elif not result and proc.returncode not in (0, 3):
        report.call_error = (f"the process stopped (status {proc.returncode}) before it finished: "
                             f"{_program_error(proc.stdout)}")
    return report


def _program_error(output: str) -> str:
    """What the program itself said last about an error (its lines, not the tool's): a
    C++ exception's ``what()`` (an error thrown while another unwinds ends the process),
    else its last line."""
    own = [l.strip() for l in output.splitlines() if l.strip() and not l.startswith(sanitizer_report.PREFIX)]
    for line in own:
        if line.startswith("what():"):
            return line.removeprefix("what():").strip()
    return own[-1] if own else "no output"
