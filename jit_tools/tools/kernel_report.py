"""Per-kernel figures of a call as data: a :class:`ProfileReport` of :class:`KernelProfile`
rows, from ncu's raw CSV (``ncu --csv --page raw --print-units base --metrics ...``) or,
where ncu is missing, from torch.profiler's kernel events. A table (a pandas DataFrame
where pandas is installed), a roofline plot (matplotlib), text and HTML for Jupyter.

The metrics are those of Nsight Compute's own roofline: DRAM bytes over the kernel's time
against ``dram__bytes.sum.peak_sustained`` at the DRAM clock, and floating-point
operations (an FMA counts two) over the time against twice the FMA peak at the SM clock.
tests/fixtures/sanitizer/ holds real ncu outputs, recorded with the commands beside them.
"""

from __future__ import annotations

import base64
import csv
import ctypes
import ctypes.util
import dataclasses
import functools
import html
import io
import math
import re
from typing import Sequence

METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second",
    "sm__cycles_elapsed.avg.per_second",
    *(f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
      for p in ("f", "d", "h") for op in ("add", "mul", "fma")),
    *(f"sm__sass_thread_inst_executed_op_{p}fma_pred_on.sum.peak_sustained" for p in ("f", "d", "h")),
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
    "launch__grid_size", "launch__block_size", "launch__waves_per_multiprocessor",
    "device__attribute_display_name",
)
PRECISIONS = {"f": "fp32", "d": "fp64", "h": "fp16"}


@dataclasses.dataclass
class KernelProfile:
    """One kernel launch: time, traffic, work, and how it was launched."""
    kernel: str                          # readable name (no return type, no parameters)
    op: str | None                       # the op it belongs to, where its namespace says
    duration_us: float
    dram_bytes: float | None = None
    bandwidth_gbs: float | None = None   # DRAM bytes / duration
    peak_bandwidth_gbs: float | None = None
    flops: float | None = None           # floating-point operations, all precisions
    gflops: float | None = None
    peak_gflops: float | None = None     # of the precision the kernel mostly uses
    precision: str | None = None
    occupancy_pct: float | None = None   # achieved: active warps of the maximum
    theoretical_occupancy_pct: float | None = None
    registers: int | None = None         # per thread
    shared_bytes: int | None = None      # per block, static and dynamic
    grid: str | None = None
    block: str | None = None
    waves: float | None = None
    full_name: str = ""

    @property
    def intensity(self) -> float | None:
        """FLOPs per DRAM byte: the roofline's x."""
        if self.flops is None or not self.dram_bytes:
            return None
        return self.flops / self.dram_bytes

    @property
    def bandwidth_pct(self) -> float | None:
        if self.bandwidth_gbs is None or not self.peak_bandwidth_gbs:
            return None
        return 100.0 * self.bandwidth_gbs / self.peak_bandwidth_gbs


COLUMNS = ("kernel", "op", "duration_us", "bandwidth_gbs", "bandwidth_pct", "gflops",
           "peak_gflops", "intensity", "occupancy_pct", "theoretical_occupancy_pct",
           "registers", "shared_bytes", "grid", "block", "waves")


@dataclasses.dataclass
class ProfileReport:
    """The kernels one call launched, in launch order."""
    kernels: list[KernelProfile]
    source: str                          # "ncu" or "torch.profiler"
    device: str = ""
    missing: str | None = None           # what this report lacks, and why
    command: list[str] = dataclasses.field(default_factory=list)
    seconds: float | None = None
    calls: list[str] = dataclasses.field(default_factory=list)

    def rows(self) -> list[dict]:
        return [{c: getattr(k, c) for c in COLUMNS} for k in self.kernels]

    def table(self):
        """A pandas DataFrame where pandas is installed, else the rows as dicts."""
        try:
            import pandas
        except ImportError:
            return self.rows()
        return pandas.DataFrame(self.rows(), columns=COLUMNS)

    def kernel(self, pattern: str) -> KernelProfile:
        """The first kernel whose name contains ``pattern``."""
        for k in self.kernels:
            if pattern in k.kernel or pattern in k.full_name:
                return k
        raise KeyError(f"no kernel matches {pattern!r}: {', '.join(k.kernel for k in self.kernels)}")

    def plot(self, ax=None):
        """The roofline of the device with each kernel as a point; the matplotlib axes."""
        import matplotlib.pyplot as plt
        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 4))
        points = [k for k in self.kernels if k.intensity and k.gflops]
        peaks = [k for k in self.kernels if k.peak_bandwidth_gbs and k.peak_gflops]
        if peaks:
            bw, fl = peaks[0].peak_bandwidth_gbs, max(k.peak_gflops for k in peaks)
            xs = [10 ** (e / 10) for e in range(-30, 31)]
            ax.plot(xs, [min(fl, bw * x) for x in xs], color="gray", label=f"roofline "
                    f"({bw:.0f} GB/s, {fl / 1000:.1f} TFLOP/s)")
        for k in points:
            ax.scatter([k.intensity], [k.gflops], label=f"{k.kernel[:48]} ({k.bandwidth_gbs:.0f} GB/s)")
        ax.set(xscale="log", yscale="log", xlabel="FLOP per DRAM byte", ylabel="GFLOP/s",
               title=f"roofline{', ' + self.device if self.device else ''}")
        if peaks or points:
            ax.legend(fontsize=7)
        return ax

    def __str__(self) -> str:
        head = f"{self.source}: {len(self.kernels)} kernel launch{'es' * (len(self.kernels) != 1)}"
        head += f" on {self.device}" if self.device else ""
        lines = [head]
        fmt = "{:<44} {:>10} {:>9} {:>6} {:>9} {:>6} {:>5} {:>7} {:>13} {:>9}"
        lines.append(fmt.format("kernel", "time (us)", "GB/s", "% peak", "GFLOP/s", "occ %",
                                "regs", "smem B", "grid", "block"))
        for k in self.kernels:
            lines.append(fmt.format(k.kernel[:44], _num(k.duration_us, 2), _num(k.bandwidth_gbs, 0),
                                    _num(k.bandwidth_pct, 0), _num(k.gflops, 1),
                                    _num(k.occupancy_pct, 0), _num(k.registers, 0),
                                    _num(k.shared_bytes, 0), k.grid or "-", k.block or "-"))
        if self.missing:
            lines.append(f"missing: {self.missing}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        table = self.table()
        body = table.to_html(index=False, float_format=lambda v: f"{v:.4g}") if hasattr(
            table, "to_html") else f"<pre>{html.escape(str(self))}</pre>"
        parts = [f"<div><b>{html.escape(str(self).splitlines()[0])}</b>{body}"]
        if self.missing:
            parts.append(f"<p>missing: {html.escape(self.missing)}</p>")
        if any(k.intensity for k in self.kernels):
            parts.append(f'<img src="data:image/png;base64,{_png(self)}"/>')
        return "".join(parts) + "</div>"


def _num(value, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _png(report: ProfileReport) -> str:
    import matplotlib
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.5, 4))
    report.plot(fig.add_subplot())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    del matplotlib
    return base64.b64encode(buffer.getvalue()).decode()


# ---- names ----------------------------------------------------------------------------------

@functools.cache
def _cxa_demangle():
    try:
        libstdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    fn = libstdcxx.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    return fn, libc.free


def demangle(name: str) -> str:
    """An Itanium-mangled name (``_Z...``, what nvcc and NVRTC emit) demangled by the C++
    runtime's own demangler; any other name as it is. ncu is asked for mangled names: the
    name it prints by default leaves out the namespaces of kernels launched from a module
    (NVRTC's), and the namespace is what says which op a kernel belongs to."""
    found = _cxa_demangle() if name.startswith("_Z") else None
    if found is None:
        return name
    fn, free = found
    status = ctypes.c_int(1)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace") if status.value == 0 else name
    finally:
        free(out)


def readable(name: str) -> str:
    """A demangled kernel name without its return type, parameters and unnamed namespaces:
    ``void planted_op::(anonymous namespace)::forward_kernel<float>(const float *, float *,
    long)`` -> ``planted_op::forward_kernel<float>``."""
    text = re.sub(r"\((anonymous namespace)\)::|<unnamed>::|\{anonymous\}::", "", name.strip())
    text = re.sub(r"^void\s+", "", text)
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the parameter list: the first "(" outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    text = text[:cut].strip()
    depth, start = 0, 0
    for i, ch in enumerate(text):  # a return type before the name: "cudaError ns::launch<float>"
        depth += (ch == "<") - (ch == ">")
        if ch == " " and depth == 0:
            start = i + 1
    return text[start:]


def op_of(name: str, namespaces: Sequence[str]) -> str | None:
    """The op a kernel belongs to: the first of ``namespaces`` (an op's, or ``<op>_op``,
    its kernels' C++ namespace) its name mentions; "torch" for PyTorch's own."""
    for ns in namespaces:
        if re.search(rf"\b{re.escape(ns)}(_op)?::", name):
            return ns
    if re.search(r"\b(at|c10|cub|cutlass|void at)::", name) or name.startswith(("at::", "cub")):
        return "torch"
    return None


# ---- ncu's raw CSV --------------------------------------------------------------------------

def _value(text: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    if not text or text in ("n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _csv_rows(output: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows of values) of the CSV in ncu's output, past its ==PROF== lines and the
    units row."""
    lines = [l for l in output.splitlines() if l.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        return [], []
    header, body = rows[0], rows[1:]
    if body and not _value(body[0][0] if body[0] else "") and body[0][0] == "":
        body = body[1:]  # units
    return header, [r for r in body if len(r) == len(header)]


def _launch(text: str | None) -> str | None:
    return re.sub(r"\s+", "", text) if text else None


def missing_metrics(output: str, requested: Sequence[str] = METRICS) -> list[str]:
    """The metrics of ``requested`` that ncu's CSV lacks: it leaves out, without a word, a
    metric that this GPU or ncu version does not know."""
    header, _ = _csv_rows(output)
    return [m for m in requested if m not in header] if header else list(requested)


def parse_ncu(output: str, namespaces: Sequence[str] = ()) -> tuple[list[KernelProfile], str]:
    """(kernels, device name) of ncu's ``--csv --page raw --print-units base`` output."""
    header, rows = _csv_rows(output)
    kernels, device = [], ""
    for row in rows:
        m = dict(zip(header, row))
        num = lambda key: _value(m.get(key, ""))  # noqa: E731
        name = demangle(m.get("Kernel Name", ""))
        duration_ns = num("gpu__time_duration.sum")
        if duration_ns is None:
            continue
        seconds = duration_ns * 1e-9
        read, write = num("dram__bytes_read.sum"), num("dram__bytes_write.sum")
        dram = None if read is None and write is None else (read or 0) + (write or 0)
        per_cycle, dram_hz = num("dram__bytes.sum.peak_sustained"), num("dram__cycles_elapsed.avg.per_second")
        sm_hz = num("sm__cycles_elapsed.avg.per_second")
        flops_by = {}
        for p, label in PRECISIONS.items():
            counts = [num(f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum") for op in ("add", "mul", "fma")]
            if any(c is not None for c in counts):
                add, mul, fma = (c or 0 for c in counts)
                flops_by[label] = add + mul + 2 * fma
        flops = sum(flops_by.values()) if flops_by else None
        precision = max(flops_by, key=flops_by.get) if flops_by and flops else None
        letter = {label: p for p, label in PRECISIONS.items()}[precision or "fp32"]
        peak_fma = num(f"sm__sass_thread_inst_executed_op_{letter}fma_pred_on.sum.peak_sustained")
        static, dynamic = num("launch__shared_mem_per_block_static"), num("launch__shared_mem_per_block_dynamic")
        registers = num("launch__registers_per_thread")
        device = device or m.get("device__attribute_display_name", "") or ""
        kernels.append(KernelProfile(
            kernel=readable(name), op=op_of(name, namespaces), duration_us=duration_ns / 1000,
            dram_bytes=dram,
            bandwidth_gbs=dram / seconds / 1e9 if dram is not None and seconds else None,
            peak_bandwidth_gbs=per_cycle * dram_hz / 1e9 if per_cycle and dram_hz else None,
            flops=flops, gflops=flops / seconds / 1e9 if flops is not None and seconds else None,
            peak_gflops=2 * peak_fma * sm_hz / 1e9 if peak_fma and sm_hz else None,
            precision=precision,
            occupancy_pct=num("sm__warps_active.avg.pct_of_peak_sustained_active"),
            theoretical_occupancy_pct=num("sm__maximum_warps_per_active_cycle_pct"),
            registers=int(registers) if registers is not None else None,
            shared_bytes=int((static or 0) + (dynamic or 0)) if static is not None or dynamic is not None else None,
            grid=_launch(m.get("Grid Size")), block=_launch(m.get("Block Size")),
            waves=num("launch__waves_per_multiprocessor"), full_name=name))
    return kernels, device
