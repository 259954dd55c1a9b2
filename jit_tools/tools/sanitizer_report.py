"""compute-sanitizer's text output as data: a :class:`SanitizerReport` of
:class:`Finding`s, each with its kind, kernel, the op's own ``file:line`` and an excerpt of
it, thread and block, the access size and where the address lies, as the tool gives them.

The parser reads the text the tool prints (``--print-limit`` findings, each a block of
lines under its prefix ``=========``); tests/fixtures/sanitizer/ holds real outputs of every
tool, recorded on a GPU with the commands beside them.
"""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path
from typing import Sequence

from jit_tools.tools.kernel_report import readable

PREFIX = "========="

# "<function>+0x<pc> in <file>:<line>": a device frame ("at ...", "Device Frame: ...", a
# race's "Write access at ...", a hazard's "Write Thread (1,0,0) at ...").
_DEVICE_FRAME = re.compile(r"\+0x[0-9a-fA-F]+\s+in\s+(?P<file>[^\s:][^:]*?):(?P<line>\d+)")
_FRAME_START = re.compile(r"(?:^|\s)at\s+|Device Frame:\s*")
# "Host Frame: <function> in <file>:<line> [0x...]" (C++), "Host Frame: <function> in <file>:<line>" (Python)
_HOST_FRAME = re.compile(r"Host Frame:\s*(?P<function>.*?) in (?P<file>/[^:\s]+):(?P<line>\d+)(?:\s|$)")
_THREAD = re.compile(r"by thread \((?P<thread>[\d, ]+)\) in block \((?P<block>[\d, ]+)\)")
_HAZARD_THREAD = re.compile(r"(?P<access>Read|Write)\s+Thread \((?P<thread>[\d, ]+)\)")
_BLOCK = re.compile(r"in block \((?P<block>[\d, ]+)\)")
_SIZE = re.compile(r"of size (?P<size>\d+) bytes?")
_ADDRESS = re.compile(r"(?:Address|Access to) (?P<address>0x[0-9a-fA-F]+)(?P<rest>.*)")
_HAZARDS = re.compile(r"\[(?P<count>\d+) hazards?\]")
_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: (?P<count>\d+) (?:errors?|hazards? displayed)"
                      r"(?: \((?P<errors>\d+) errors?, (?P<warnings>\d+) warnings?\))?")
_API_ERROR = re.compile(r"^Program hit (?P<what>.*)")
_SEVERITY = re.compile(r"^(?P<severity>Error|Warning|WARN|ERROR|INFO|Info):\s*(?P<rest>.*)")


@dataclasses.dataclass
class SourceLine:
    """A line of source as the tool names it, with the function it is in."""
    file: str
    line: int
    function: str = ""

    def excerpt(self, context: int = 2) -> str:
        """The lines around it, the named one marked ``>``; "" when the file is gone."""
        try:
            lines = Path(self.file).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        first, last = max(1, self.line - context), min(len(lines), self.line + context)
        return "\n".join(f"{'>' if n == self.line else ' '} {n:5d} | {lines[n - 1]}"
                         for n in range(first, last + 1))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def _triple(text: str | None) -> tuple[int, ...] | None:
    return tuple(int(v) for v in text.split(",")) if text else None


@dataclasses.dataclass
class Finding:
    """One thing the tool reports (a finding it reports many times is one, with ``count``)."""
    tool: str
    kind: str                      # "Invalid __global__ write", "Race: Write / Read", ...
    severity: str                  # "error" or "warning"
    kernel: str | None             # the kernel (demangled), where the tool names it
    where: SourceLine | None       # the op's own line (else the first line named)
    frames: list[SourceLine]       # every source line the report names, in its order
    thread: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    access_size: int | None = None  # bytes
    address: str | None = None
    relation: str | None = None    # where the address lies ("1 bytes after the nearest allocation ...")
    launched_from: SourceLine | None = None  # the op's host line that launched the kernel
    hazards: int | None = None     # racecheck: hazards behind this race
    count: int = 1
    text: str = ""                 # the tool's own lines

    @property
    def excerpt(self) -> str:
        return self.where.excerpt() if self.where else ""

    def headline(self) -> str:
        where = f" at {self.where}" if self.where else ""
        kernel = f" in {self.kernel}" if self.kernel else ""
        return f"{self.kind}{where}{kernel}"

    def details(self) -> list[str]:
        out = []
        if self.thread or self.block:
            out.append(f"thread {self.thread} in block {self.block}")
        if self.access_size is not None:
            out.append(f"access of {self.access_size} bytes")
        if self.address:
            out.append(f"address {self.address}" + (f" {self.relation}" if self.relation else ""))
        if self.hazards is not None:
            out.append(f"{self.hazards} hazards")
        if self.launched_from is not None:
            out.append(f"launched by {readable(self.launched_from.function)} at {self.launched_from}")
        others = [str(f) for f in self.frames if f != self.where]
        if others:
            out.append("also at " + ", ".join(dict.fromkeys(others)))
        if self.count > 1:
            out.append(f"reported {self.count} times")
        return out


@dataclasses.dataclass
class SanitizerReport:
    """What one run of compute-sanitizer found; ``clean`` when nothing."""
    tool: str
    findings: list[Finding]
    run_errors: list[str]          # failed CUDA API calls (after a finding, mostly), the tool's own errors
    summary: int | None            # the tool's own count of errors or hazards
    call_error: str | None = None  # the call itself raised (a failed launch, a bad argument)
    command: list[str] = dataclasses.field(default_factory=list)
    seconds: float | None = None
    output: str = ""               # the tool's whole output
    calls: list[str] = dataclasses.field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings and not self.run_errors and not self.summary and not self.call_error

    def __str__(self) -> str:
        head = f"compute-sanitizer {self.tool}: "
        ran = f" ({len(self.calls)} call{'s' * (len(self.calls) != 1)}" + (
            f", {self.seconds:.1f} s)" if self.seconds is not None else ")")
        if self.clean:
            return head + "clean, nothing found" + ran
        shown = sum(f.count for f in self.findings)
        counted = (f"; the tool counted {self.summary} errors, printed {shown}"
                   if self.summary and self.summary > shown + len(self.run_errors) else "")
        lines = [head + f"{len(self.findings)} finding{'s' * (len(self.findings) != 1)}" + ran + counted]
        for i, f in enumerate(self.findings, 1):
            lines.append(f"[{i}] {f.severity}: {f.headline()}")
            lines += [f"    {d}" for d in f.details()]
            if f.excerpt:
                lines += ["    " + l for l in f.excerpt.splitlines()]
        if self.call_error:
            lines.append(f"the call raised: {self.call_error}")
        lines += [f"also: {e}" for e in self.run_errors]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        color = "#1a7f37" if self.clean else "#cf222e"
        title = str(self).splitlines()[0]
        parts = [f'<div><b style="color:{color}">{esc(title)}</b>']
        for i, f in enumerate(self.findings, 1):
            parts.append(f"<p><b>[{i}] {esc(f.severity)}: {esc(f.headline())}</b><br>"
                         + "<br>".join(esc(d) for d in f.details()) + "</p>")
            if f.excerpt:
                parts.append(f"<pre>{esc(f.excerpt)}</pre>")
        if self.call_error:
            parts.append(f"<p>the call raised: <code>{esc(self.call_error)}</code></p>")
        parts += [f"<p>also: {esc(e)}</p>" for e in self.run_errors]
        return "".join(parts) + "</div>"


def _blocks(output: str) -> list[list[str]]:
    """The tool's lines (prefix removed), grouped into one block per message: a message
    starts at a line that is not indented and ends at the next one or at a blank line."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for raw in output.splitlines():
        if not raw.startswith(PREFIX):
            continue
        line = raw[len(PREFIX):]
        if not line.strip():
            current = None
            continue
        if not line.startswith("  ") or current is None:
            current = [line.strip()]
            blocks.append(current)
        else:
            current.append(line.strip())
    return blocks


def _location(line: str) -> SourceLine | None:
    m = _DEVICE_FRAME.search(line)
    if m is None:
        return None
    function = _FRAME_START.split(line[:m.start()])[-1]
    return SourceLine(m.group("file").strip(), int(m.group("line")), function.strip())


def _in(frame: SourceLine, op_dirs: Sequence[Path]) -> bool:
    return any(frame.file.startswith(str(Path(d).resolve()) + "/") for d in op_dirs)


def _own(frames: Sequence[SourceLine], op_dirs: Sequence[Path]) -> SourceLine | None:
    """The first frame in one of the ops' folders, else the first frame."""
    return next((f for f in frames if _in(f, op_dirs)), frames[0] if frames else None)


def _kernel(frames: Sequence[SourceLine]) -> str | None:
    """The kernel: the outermost device frame (the inner ones are functions it inlined)."""
    return readable(frames[-1].function) if frames else None


def _finding(tool: str, block: list[str], op_dirs: Sequence[Path]) -> Finding | None:
    head = block[0]
    severity = "error"
    m = _SEVERITY.match(head)
    if m:
        severity = "warning" if m.group("severity").lower().startswith("warn") else "error"
        if m.group("severity").lower() == "info":
            return None
        head = m.group("rest")
    # The device lines; the host backtrace after them names the launcher, the op's C++
    # host side and its Python lines.
    device, host = [], []
    for line in block:
        (host if host or line.startswith(("Saved host backtrace", "Host Frame")) else device).append(line)
    text = " ".join(device)
    frames = [loc for line in device if (loc := _location(line)) is not None]
    host_frames = [SourceLine(m.group("file"), int(m.group("line")), m.group("function").strip())
                   for line in host if (m := _HOST_FRAME.search(line))]
    kind = head.split(" at ")[0].rstrip(":. ").replace(" detected", "").strip()
    if kind.startswith("Race reported between"):
        accesses = re.findall(r"(Read|Write) access", text)
        kind = "Race between " + " and ".join(accesses) + " access" if accesses else "Race"
    size = _SIZE.search(head)
    if size and "size" in kind:
        kind = kind[:size.start()].strip()
    thread = _THREAD.search(text)
    hazard_threads = _HAZARD_THREAD.findall(text)
    block_m = _BLOCK.search(text)
    address = next((m for line in device if (m := _ADDRESS.search(line))), None)
    relation = None
    if address:  # "Access to 0x... is out of bounds" / "and is 1 bytes after the nearest allocation ..."
        after = [l for l in device if l.startswith("and is ")]
        relation = " ".join([address.group("rest").strip(), *after]).strip() or None
    hazards = _HAZARDS.search(text)
    launched = [f for f in host_frames if _in(f, op_dirs)]
    return Finding(
        tool=tool, kind=kind, severity=severity, kernel=_kernel(frames),
        where=_own(frames, op_dirs), frames=frames,
        launched_from=launched[0] if launched else None,
        thread=_triple(thread.group("thread")) if thread else (
            _triple(hazard_threads[0][1]) if hazard_threads else None),
        block=_triple(thread.group("block") if thread else (block_m.group("block") if block_m else None)),
        access_size=int(size.group("size")) if size else None,
        address=address.group("address") if address else None, relation=relation,
        hazards=int(hazards.group("count")) if hazards else None, text="\n".join(block))


# Lines of the tool about the run, not about the code: not findings. (The process's own
# failure is the report's call_error.)
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "Target application returned an error",
                 "Saved host backtrace", "Host Frame", "Error: process didn't terminate successfully")
# The tool could check nothing: said in run_errors.
_RUN_ERRORS = re.compile(r"^Error: (?P<what>Target application terminated before first instrumented "
                         r"API call.*)")


def parse(tool: str, output: str, op_dirs: Sequence[Path] = ()) -> SanitizerReport:
    """The report of ``output``, compute-sanitizer's text; a finding's ``where`` is its first
    source line inside one of ``op_dirs`` (the ops checked), else its first source line.
    Findings of the same kind at the same lines are merged (``count``)."""
    findings: dict[tuple, Finding] = {}
    run_errors: list[str] = []
    summary = None
    for block in _blocks(output):
        head = block[0]
        m = _SUMMARY.search(head)
        if m:
            summary = int(m.group("errors")) if m.group("errors") is not None else int(m.group("count"))
            continue
        api = _API_ERROR.match(head) or _RUN_ERRORS.match(head)
        if api:
            run_errors.append(api.group("what").strip().rstrip("."))
            continue
        if head.startswith(_NOT_FINDINGS):
            continue
        found = _finding(tool, block, op_dirs)
        if found is None:
            continue
        key = (found.kind, found.kernel, tuple((f.file, f.line) for f in found.frames))
        if key in findings:
            findings[key].count += 1
        else:
            findings[key] = found
    return SanitizerReport(tool=tool, findings=list(findings.values()),
                           run_errors=list(dict.fromkeys(run_errors)), summary=summary, output=output)
