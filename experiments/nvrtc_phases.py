"""Where an NVRTC compile of an op's kernel spends its time: NVRTC's own phase timings
(``--time``: front end, NVVM optimizer, PTX translation) for one instantiation of the op's
``.cu``, without and with the precompiled header of its include block, and for one header
alone. Needs no GPU (NVRTC compiles for the arch given).

    python -m experiments.nvrtc_phases sigmoid [--arch 9.0] [--kernel '<4, 2,'] [--repeats 3]
        [--header '<cuda/std/type_traits>' ...]

``--kernel``: the instantiation whose name contains this text (default: the first float
one); ``--header``: also a tiny kernel alone and after this one include, without and with
the precompiled header.
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import time
from pathlib import Path

import jit_loader
from jit_tools import key as keys, sources
from jit_tools.swap import nvrtc


def _compile(source: Path, text: bytes, names: list[str], options: list[str]) -> tuple[float, str]:
    """(wall seconds, NVRTC's phase line) of one compile."""
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "time.csv"
        t = time.perf_counter()
        status, log, _, _ = nvrtc.run_nvrtc(source, text, names, [*options, f"--time={csv}"], True)
        seconds = time.perf_counter() - t
        if status != 0:
            raise SystemExit(f"NVRTC failed:\n{log}")
        phases = [line.split(",") for line in csv.read_text().splitlines()[1:]]
        return seconds, ", ".join(f"{p[1].strip()} {p[2].strip()} ms" for p in phases if len(p) >= 3)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op")
    parser.add_argument("--arch", default="9.0")
    parser.add_argument("--header", action="append", default=[],
                        help="also time a tiny kernel after this include alone")
    parser.add_argument("--kernel", default="float",
                        help="the instantiation whose name contains this (default: float)")
    parser.add_argument("--repeats", type=int, default=2, help="compiles with the header")
    args = parser.parse_args(argv)
    op = jit_loader.load(args.op)
    (cu,) = sorted(op.path.glob("*.cu"))
    mangled = nvrtc.library_kernels(op.library)
    exprs = [nvrtc.name_expression(m) for m in mangled]
    names = ([e for e in exprs if args.kernel in e] or exprs)[:1]  # one instantiation
    cfg = keys.config(args.op, op.path, {}, [cu])
    flags = [t for f in cfg["cuda_cflags"] for t in shlex.split(f)]
    options = nvrtc.compile_options(args.arch, sources.include_dirs(op.path, {}), flags)
    text = cu.read_bytes()
    print(f"{args.op}: {cu.name}, {names[0]}, NVRTC {nvrtc.version()}")
    print("  without the precompiled header: %.3f s (%s)" % _compile(cu, text, names, options))
    with tempfile.TemporaryDirectory() as pch:
        with_pch = [*options, "--pch", f"--pch-dir={pch}"]
        print("  making the precompiled header: %.3f s (%s)" % _compile(cu, text, names, with_pch))
        size = sum(p.stat().st_size for p in Path(pch).iterdir()) / 1e6
        print(f"  the precompiled header: {size:.1f} MB")
        for i in range(args.repeats):
            print("  with it: %.3f s (%s)" % _compile(cu, text, names, with_pch))
    for header in ["", *args.header]:
        line = "" if not header else (f"#include {header}\n" if header.startswith("<")
                                      else f'#include "{header}"\n')
        source = (line + TINY).encode()
        what = f"{header} and a tiny kernel" if header else "a tiny kernel alone"
        print(f"  {what}: %.3f s (%s)" % _compile(cu, source, [], options))
        with tempfile.TemporaryDirectory() as pch:
            with_pch = [*options, "--pch", f"--pch-dir={pch}"]
            _compile(cu, source, [], with_pch)
            print(f"  {what}, with its precompiled header: %.3f s (%s)"
                  % min(_compile(cu, source, [], with_pch) for _ in range(args.repeats)))
    return 0


# CuPy's kernel of the edit-loop benchmark: what a one-line loop costs NVRTC.
TINY = ('extern "C" __global__ void tiny(const float* x, float* y, long n) {\n'
        '  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)\n'
        '    y[i] = 1.0f / (1.0f + expf(-x[i]));\n}\n')


if __name__ == "__main__":
    raise SystemExit(main())
