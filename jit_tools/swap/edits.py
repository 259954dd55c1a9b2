"""Which edits of an op's sources the load path takes live instead of building, read from
the texts alone (no compiler).

An edit is *live* when its effect on the live build is limited to code that is compiled
again without a build or behind a gate:

- device code (the bodies of ``__global__`` functions, ``__device__`` functions and the
  bodies of host-device functions, ``__host__ __device__``, ``OPS_HOST_DEVICE``,
  ``C10_HOST_DEVICE``), which NVRTC compiles for the next CUDA launch;
- the host units that include an edited file (*stale units*), which must be CPU-loop
  units (``<op>_cpu.cpp``: a stem ending in ``_cpu``, no registration but a CPU kernel
  block): their code is rebuilt in the background and every CPU call waits for it
  (``jit_tools/swap/gate.py``).

Everything else builds, judged conservatively:

1. The configuration and the set of files are those of the live build; only headers and
   the ``.cu`` changed, never a ``.cpp``.
2. Each changed file reads the same once device code and the bodies of host-device
   functions are left out (:func:`device_free_view`): launchers, signatures, types,
   constants, macros and includes are unchanged.
3. No host-device function whose body changed is reachable from host code compiled into
   the ``.cu`` (its launchers, by name, through the bodies of the host-device functions
   they call): its host copy there is the live build's.
4. Stale units are CPU-loop units, and every registration block of the op's host units
   is a CPU or CUDA kernel block, or a schema block with schemas only (``m.def("...")``):
   so CPU kernels are the only way into a stale unit's code, and the gate at the CPU key
   holds every path.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from jit_tools import sources

_COMMENT_OR_LITERAL = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_MARKER = re.compile(r"\b(__global__|__device__|__host__|OPS_HOST_DEVICE|C10_HOST_DEVICE)\b")
# Macros that stand for __host__ __device__ (ops/common/host_device.h, c10's).
_HOST_DEVICE_MACROS = ("OPS_HOST_DEVICE", "C10_HOST_DEVICE")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')  # names in them are no calls


def strip_comments(text: str) -> str:
    return _COMMENT_OR_LITERAL.sub(lambda m: " " if m.group(0)[0] == "/" else m.group(0), text)


def _matching_brace(code: str, open_at: int) -> int:
    """The index of the brace closing the one at ``open_at``; -1 when the text ends first."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


@dataclasses.dataclass(frozen=True)
class Function:
    """A function definition marked for the device: ``kind`` is ``global``, ``device``
    (``__device__`` without ``__host__``) or ``host_device``."""
    kind: str
    name: str
    start: int       # where the declaration begins (its template header included)
    body_open: int   # the "{" of the body
    end: int         # one past the "}" of the body


class Unbalanced(ValueError):
    """A function body whose braces do not close: the text is not judged."""


def functions(code: str, declarations: bool = False) -> list[Function]:
    """The device-marked function definitions of ``code`` (comments stripped), in order;
    with ``declarations``, their declarations too (``body_open == end``: no body)."""
    found: list[Function] = []
    decl_start = 0   # where the declaration holding the current position began
    i = 0
    while i < len(code):
        c = code[i]
        if c == "#" and not code[code.rfind("\n", 0, i) + 1:i].strip():
            end = i
            while True:  # a directive, with its continuation lines
                end = code.find("\n", end)
                if end < 0 or code[end - 1] != "\\":
                    break
                end += 1
            i = len(code) if end < 0 else end
            decl_start = i
            continue
        if c in ";{}":
            decl_start = i + 1
            i += 1
            continue
        m = _MARKER.match(code, i)
        if m is None or (i > 0 and (code[i - 1].isalnum() or code[i - 1] == "_")):
            i += 1
            continue
        # A function definition: parentheses, then "{" at depth 0, no "=" before it.
        j, depth, saw_paren, name_end = m.end(), 0, False, -1
        while j < len(code):
            if code[j] == "(":
                if depth == 0 and name_end < 0:
                    name_end = j
                depth, saw_paren = depth + 1, True
            elif code[j] == ")":
                depth -= 1
            elif depth == 0 and code[j] in ";={":
                break
            j += 1
        if declarations and j < len(code) and code[j] == ";" and saw_paren:
            names = _IDENTIFIER.findall(code[m.end():name_end])
            found.append(Function("declaration", names[-1] if names else "", decl_start, j, j))
            i = decl_start = j + 1
            continue
        if j >= len(code) or code[j] != "{" or not saw_paren:
            i = m.end()
            continue
        close = _matching_brace(code, j)
        if close < 0:
            raise Unbalanced(f"the body at offset {j} does not close")
        head = code[decl_start:j]
        words = set(_MARKER.findall(head))
        if "__global__" in words:
            kind = "global"
        elif words & {"__host__", *_HOST_DEVICE_MACROS}:
            kind = "host_device"
        else:
            kind = "device"
        names = _IDENTIFIER.findall(code[m.end():name_end])
        # The function begins on its marker's line, or at the template header just above
        # it; text before that since the last ";{}" (a macro invocation without a
        # semicolon) belongs to what came before.
        start = code.rfind("\n", 0, m.start()) + 1
        above = code.rfind("\n", 0, max(start - 1, 0)) + 1
        if start > decl_start and code[above:start].strip().startswith("template"):
            start = above
        found.append(Function(kind, names[-1] if names else "", max(start, decl_start), j,
                              close + 1))
        i = decl_start = close + 1
    return found


def _view(text: str, keep_host_device: bool) -> str:
    code = strip_comments(text)
    out, pos = [], 0
    for f in functions(code):
        if f.kind == "host_device" and keep_host_device:
            continue
        if f.kind == "device":
            out.append(code[pos:f.start] + " ")
        else:  # the launchers name a kernel, host code calls a host-device function
            out.append(code[pos:f.body_open] + "{ <device code> }")
        pos = f.end
    out.append(code[pos:])
    return " ".join("".join(out).split())


def host_view(text: str) -> str:
    """``text`` as host code sees it: comments out, whitespace collapsed, the body of each
    ``__global__`` function and the whole of each ``__device__`` function left out;
    host-device functions stay (host code may call them). Preprocessor lines stay."""
    return _view(text, keep_host_device=True)


def device_free_view(text: str) -> str:
    """:func:`host_view` with the bodies of host-device functions left out too (their
    signatures stay): two texts with the same view differ in function bodies compiled
    for the device (and, for host-device ones, for the host)."""
    return _view(text, keep_host_device=False)


def changed_host_device(old: str, new: str) -> set[str]:
    """Names of the host-device functions whose bodies differ between two texts of equal
    :func:`device_free_view` (their definitions pair up in order)."""
    a, b = strip_comments(old), strip_comments(new)
    fa = [f for f in functions(a) if f.kind == "host_device"]
    fb = [f for f in functions(b) if f.kind == "host_device"]
    body = lambda code, f: " ".join(code[f.body_open:f.end].split())  # noqa: E731
    return {x.name for x, y in zip(fa, fb) if body(a, x) != body(b, y)}


def host_names(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(identifiers of the host code of ``text``: everything but kernels, device and
    host-device functions and their declarations; name of each host-device function -> identifiers of its
    definition)."""
    code = strip_comments(text)
    host, pos = [], 0
    calls: dict[str, set[str]] = {}
    for f in functions(code, declarations=True):  # a declaration calls nothing
        host.append(code[pos:f.start])
        pos = f.end
        if f.kind == "host_device":
            calls.setdefault(f.name, set()).update(
                _IDENTIFIER.findall(_LITERAL.sub(" ", code[f.start:f.end])))
    host.append(code[pos:])
    return set(_IDENTIFIER.findall(_LITERAL.sub(" ", "".join(host)))), calls


def reachable_from_host(texts: list[str]) -> set[str]:
    """Identifiers that host code of ``texts`` (one translation unit's files) names
    directly or through the host-device functions it calls, by name."""
    reach: set[str] = set()
    calls: dict[str, set[str]] = {}
    for text in texts:
        names, bodies = host_names(text)
        reach |= names
        for k, v in bodies.items():
            calls.setdefault(k, set()).update(v)
    todo = [n for n in reach if n in calls]
    while todo:
        for n in calls.pop(todo.pop(), ()):
            if n not in reach:
                reach.add(n)
                if n in calls:
                    todo.append(n)
    return reach


# ---- registration blocks ---------------------------------------------------------------------

_BLOCK = re.compile(r"\b(?:STABLE_)?TORCH_LIBRARY(_IMPL|_FRAGMENT)?\s*\(([^)]*)\)\s*\{")
_KERNEL_IN_SCHEMA_BLOCK = re.compile(r'\.\s*(?:impl|fallback|class_)\b|\.\s*def\s*\(\s*(?!"(?:\\.|[^"\\])*"\s*\))')


@dataclasses.dataclass(frozen=True)
class Block:
    kind: str        # "def", "fragment" or "impl"
    key: str | None  # the dispatch key of an impl block
    kernel_free: bool  # a schema block with schemas only


def registration_blocks(text: str) -> list[Block]:
    """The ``TORCH_LIBRARY*`` and ``STABLE_TORCH_LIBRARY*`` blocks a text opens."""
    code = strip_comments(text)
    out = []
    for m in _BLOCK.finditer(code):
        kind = {"_IMPL": "impl", "_FRAGMENT": "fragment"}.get(m.group(1) or "", "def")
        args = [a.strip() for a in m.group(2).split(",")]
        close = _matching_brace(code, m.end() - 1)
        body = code[m.end():close if close >= 0 else len(code)]
        out.append(Block(kind, args[1] if kind == "impl" and len(args) > 1 else None,
                         kind != "impl" and _KERNEL_IN_SCHEMA_BLOCK.search(body) is None))
    return out


# ---- the judgement -----------------------------------------------------------------------

@dataclasses.dataclass
class LiveEdit:
    """An edit the load path takes live: NVRTC compiles the kernels; ``stale_units`` (host
    units that include an edited file) rebuild behind the CPU gate."""
    changed: list[Path]
    stale_units: list[Path]


def judge(live_texts: dict[Path, bytes], texts: dict[Path, bytes], compiled: list[Path],
          include_dirs: list[Path]) -> LiveEdit | str:
    """A :class:`LiveEdit` when ``texts`` (every file compiled or included, as they are
    now) differ from the live build's ``live_texts`` only as the module docstring allows;
    else why not, in a few words. The configuration is the caller's to compare."""
    if set(texts) != set(live_texts):
        return "files were added or removed"
    changed = sorted(p for p in texts if texts[p] != live_texts[p])
    if not changed:
        return "no source changed"
    cus = [p for p in compiled if p.suffix in sources.CUDA_SUFFIXES]
    host_units = [p for p in compiled if p.suffix not in sources.CUDA_SUFFIXES]
    decoded = {p: t.decode(errors="replace") for p, t in texts.items()}
    changed_hd: set[str] = set()
    try:
        for p in changed:
            if p in host_units:
                return f"{p.name} is a host source"
            old = live_texts[p].decode(errors="replace")
            if device_free_view(old) != device_free_view(decoded[p]):
                return f"the host code of {p.name} changed (more than function bodies)"
            changed_hd |= changed_host_device(old, decoded[p])
        if changed_hd:
            for cu in cus:
                unit = [cu, *sources.local_headers([cu], include_dirs)]
                called = changed_hd & reachable_from_host([decoded[q] for q in unit if q in decoded])
                if called:
                    return (f"host code of {cu.name} calls {', '.join(sorted(called))}, "
                            "whose body changed")
    except Unbalanced as e:
        return f"a function body could not be delimited ({e})"
    closures = {u: {u, *sources.local_headers([u], include_dirs)} for u in host_units}
    blocks = {u: [b for q in sorted(files) if q in decoded for b in registration_blocks(decoded[q])]
              for u, files in closures.items()}
    stale = [u for u in host_units if closures[u] & set(changed)]
    for unit in stale:
        if not unit.stem.endswith("_cpu"):
            edited = ", ".join(q.name for q in sorted(closures[unit] & set(changed)))
            return f"{unit.name} includes {edited} and is not a CPU-loop unit (<op>_cpu.cpp)"
        if any(b.kind != "impl" or b.key != "CPU" for b in blocks[unit]):
            return f"{unit.name} registers more than CPU kernels"
    if stale:  # the CPU gate must hold every way into the stale units' code
        for unit in host_units:
            for b in blocks[unit]:
                if b.kind == "impl" and b.key not in ("CPU", "CUDA"):
                    return f"{unit.name} registers a kernel at {b.key}"
                if b.kind != "impl" and not b.kernel_free:
                    return f"{unit.name} registers a kernel in a schema block"
    return LiveEdit(changed, stale)
