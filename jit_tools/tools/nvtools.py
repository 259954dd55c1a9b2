"""What ``sanitize`` and ``profile`` share: finding NVIDIA's command-line tools, building
the builds a fresh process will load (outside the tool, so a compile is never run under
it), and running that process under a tool with a bound on its time.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from jit_tools import pipeline
from jit_tools.builder import toolchain
from jit_tools.errors import BuildError, JitLoaderError
from jit_tools.tools import fresh_call


class ToolMissing(JitLoaderError):
    """compute-sanitizer or ncu is not installed where the loader looks."""


class ToolTimeout(JitLoaderError):
    """The tool ran past its time limit and was stopped."""


# tool -> (environment variable naming it, folders below a CUDA toolkit, pip's wheels)
_PLACES = {
    "compute-sanitizer": ("JIT_LOADER_COMPUTE_SANITIZER", ("bin", "compute-sanitizer"),
                          "nvidia/cu*/bin/compute-sanitizer"),
    "ncu": ("JIT_LOADER_NCU", ("bin", "nsight-compute*"), None),
}


def candidates(tool: str) -> list[str]:
    """Where ``tool`` is looked for, in order: its variable, PATH, the CUDA toolkit (its
    bin/ and the tool's own folder), /opt/nvidia, NVIDIA's Python wheels."""
    variable, below_home, wheel = _PLACES[tool]
    found = []
    if os.environ.get(variable):
        found.append(os.environ[variable])
    on_path = shutil.which(tool)
    if on_path:
        found.append(on_path)
    homes = [h for h in (toolchain.cuda_home(), "/usr/local/cuda") if h]
    for home in dict.fromkeys(homes):
        for sub in below_home:
            found += sorted(glob.glob(os.path.join(home, sub, tool)), reverse=True)
    found += sorted(glob.glob(f"/opt/nvidia/nsight-compute/*/{tool}"), reverse=True)
    if wheel:
        for base in sys.path:
            found += sorted(glob.glob(os.path.join(base, wheel)))
    return list(dict.fromkeys(found))


def find(tool: str, what_for: str) -> str:
    """The path of ``tool``; ToolMissing saying where it was looked for and how to get it."""
    for path in candidates(tool):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    variable, _, wheel = _PLACES[tool]
    where = f"PATH, {toolchain.cuda_home() or '/usr/local/cuda'}/bin, /opt/nvidia"
    get = ("it comes with the CUDA toolkit, and in NVIDIA's wheel nvidia-cuda-sanitizer-api "
           "(-cu12 for CUDA 12)" if tool == "compute-sanitizer"
           else "it comes with the CUDA toolkit and with Nsight Compute")
    raise ToolMissing(f"{tool} was not found (looked in {where}{', Python wheels' if wheel else ''}; "
                      f"{what_for} runs it): {get}; or set {variable} to its path")


def needs_gpu(what_for: str) -> None:
    import torch
    if not torch.cuda.is_available():
        raise JitLoaderError(f"no CUDA GPU is visible (torch {torch.__version__}, CUDA "
                             f"{torch.version.cuda}); {what_for} runs the call on one")


def child_env(**extra: str | None) -> dict:
    """The environment of the fresh process: this one's, with the repository importable,
    no warm-up of NVRTC headers (nothing is edited there), ``extra`` last (None removes)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, JIT_LOADER_NVRTC_WARM="0")
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def op_options(op_dirs: Sequence[Path], **override) -> dict[str, dict]:
    """Each op's build options as this process loaded it (the defaults for one it did not),
    with ``override`` (e.g. ``debug=True``)."""
    from jit_tools.state import loaded_states
    current = {str(s.op_dir): s.options for s in loaded_states() if s.sources is None}
    return {str(d): {**current.get(str(d), {}), **override} for d in op_dirs}


def ensure_built(options: dict[str, dict], what_for: str, timeout: float) -> float:
    """Build what the fresh process will load, unless the cache holds it, in a process of
    its own (this process keeps the builds it runs); the seconds it took. A failed build
    raises BuildError with the compiler's first error."""
    missing = {}
    for op_dir, opts in options.items():
        key, _ = pipeline.op_key(op_dir, **opts)
        if not any(b["key"] == key and b["valid"] for b in pipeline.cached_builds(Path(op_dir).name)):
            missing[op_dir] = opts
    if not missing:
        return 0.0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jit_loader_build_") as tmp:
        spec = fresh_call.write_spec(Path(tmp), [], list(map(Path, missing)), missing, "build")
        proc = subprocess.run([sys.executable, "-m", "jit_tools.tools.fresh_call", str(spec)],
                              env=child_env(), capture_output=True, text=True, timeout=timeout)
        result = fresh_call.read_result(spec)
    if proc.returncode != 0:
        error = result.get("error") or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"{what_for}: building {', '.join(Path(d).name for d in missing)} failed: "
                         f"{error}", log_path=None, log=proc.stdout + proc.stderr)
    return time.perf_counter() - started


def run_tool(command: list[str], env: dict, timeout: float, what_for: str) -> subprocess.CompletedProcess:
    """Run ``command`` to its end, or stop it (and what it started) after ``timeout``."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        raise ToolTimeout(f"{what_for} ran past its limit of {timeout:.0f} s and was stopped "
                          f"(timeout=...); its output so far:\n{out[-3000:]}") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, "")
