"""Jupyter integration: ``%load_ext jit_loader``.

Loading the extension gives a notebook three things:

* before every cell runs, each op this kernel loaded from a folder (``jit_loader.load``)
  is checked for edited sources, headers and Python surface, and rebuilt and reloaded
  if anything changed: edit a ``.cu`` in an editor, re-run the cell, get the new kernel;
* ``%jit_reload`` runs the same check on demand, and fails the cell on a compile error;
* the cell magic ``%%jit_op NAME [--cuda] [--verbose]`` turns the C++ (or CUDA) source
  held by a cell into an op bound to ``NAME`` in the notebook.

A failed rebuild before a cell does not stop that cell. The report goes to the cell's
stderr, compiler location first (``file:line: message``, then the log path), and the
cell runs with the op's last good build. Stopping the cell would also stop the cell
that repairs the source from the notebook, and every other cell until the file is
fixed; the report above the output says which build ran. The report is shown in full
once; later cells get a one-line reminder until the source changes again.

A ``%%jit_op`` cell whose source does not compile fails, with the compiler's messages
at the cell's own line numbers (line 1 is the first line after ``%%jit_op``); the op
keeps its previous build.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import warnings
from pathlib import Path

from jit_tools import pipeline, registry, store as stores
from jit_tools.errors import BuildError
from jit_tools.handle import Op
from jit_tools.state import loaded_states
from jit_tools.swap import hotswap

DIAGNOSTIC_LINES = 12
_CONTEXT_LINE = re.compile(
    r"^\S.*: In (?:member |static )?[a-z ]*(?:function|constructor|destructor)\b.*:$")
_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
_EXTENSION: "_Extension | None" = None


def load_ipython_extension(ipython) -> None:
    global _EXTENSION
    if _EXTENSION is not None:
        return
    _quiet_progress_bar_import()
    _EXTENSION = _Extension(ipython)
    ipython.events.register("pre_run_cell", _EXTENSION.pre_run_cell)
    ipython.register_magic_function(_EXTENSION.jit_reload, "line", "jit_reload")
    ipython.register_magic_function(_EXTENSION.jit_op, "cell", "jit_op")
    hotswap.expect_kernel_edits()  # NVRTC's headers made ahead of the first kernel edit


def unload_ipython_extension(ipython) -> None:
    global _EXTENSION
    if _EXTENSION is None:
        return
    ipython.events.unregister("pre_run_cell", _EXTENSION.pre_run_cell)
    ipython.magics_manager.magics["line"].pop("jit_reload", None)
    ipython.magics_manager.magics["cell"].pop("jit_op", None)
    hotswap.expect_kernel_edits(False)
    _EXTENSION = None


def _loaded_ops() -> list[Op]:
    return [Op(state) for state in loaded_states()]


def _quiet_progress_bar_import() -> None:
    """The loader's progress bar comes from ``tqdm.auto``; without ipywidgets it falls
    back to a text bar, which works well in a cell, after a warning that does not."""
    try:
        from tqdm import TqdmWarning
    except ImportError:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        import tqdm.auto  # noqa: F401


# --------------------------------------------------------------------------------------
# Reporting build errors
# --------------------------------------------------------------------------------------


def compiler_diagnostics(log: str, limit: int = DIAGNOSTIC_LINES) -> list[str]:
    """The compiler's own lines from the first error on, without Ninja's command lines,
    the "In function ...:" context lines and the repeats of one error (a template
    instantiated once per dtype of a dispatch reports it once per dtype)."""
    kept: list[str] = []
    for line in log.splitlines():
        if (line.startswith(("[", "FAILED:", "ninja:")) or len(line) > 400 or line in kept
                or _CONTEXT_LINE.match(line)):
            continue
        if kept or "error" in line:
            kept.append(line)
        if len(kept) >= limit:
            break
    return kept


def build_error_report(err: BuildError, op_name: str, *, color: bool = True) -> list[str]:
    """Lines describing a failed build: ``file:line: message`` first, then the log path,
    then the compiler's diagnostics."""
    first = str(err).splitlines()[0]
    if color:
        first = f"{_RED}{_BOLD}{first}{_RESET}"
    lines = [first, f"building op {op_name!r} failed; full log: {err.log_path}"]
    lines += ["    " + line for line in compiler_diagnostics(err.log)]
    return lines


class CellBuildError(BuildError):
    """A BuildError that IPython shows as the compiler report, without a Python traceback."""

    def __init__(self, err: BuildError, op_name: str, note: str = ""):
        super().__init__(str(err), log_path=err.log_path, file=err.file, line=err.line, log=err.log)
        self.op_name = op_name
        self.note = note

    def _render_traceback_(self) -> list[str]:
        lines = build_error_report(self, self.op_name)
        if self.note:
            lines.append(self.note)
        return lines


# --------------------------------------------------------------------------------------
# The extension
# --------------------------------------------------------------------------------------


def _is_inline(op: Op) -> bool:
    """Ops built from cell text live in the cache; only their cell changes them."""
    inline_root = stores.current().inline_root().resolve()
    return op.path.parent == inline_root


def _content_key(op: Op) -> str | None:
    """Hash of the op's sources, headers and build configuration (builds nothing)."""
    try:
        return op.current_key()
    except Exception:  # noqa: BLE001 - a folder being edited; treat as changed
        return None


def _build_summary(op: Op) -> str:
    info = op.build
    if info is None:
        return "not built"
    if info.compiled:
        return f"compiled in {info.seconds:.1f} s"
    return "loaded from the build cache"


class _Extension:
    def __init__(self, ipython):
        self.ipython = ipython
        self.reported: dict[Path, str] = {}  # op folder -> first line of its reported error
        # op folder -> (content key, error) of a build that failed at a line of the
        # sources: retried once the content changes, so that a broken source is not
        # compiled again before every cell.
        self.failed: dict[Path, tuple[str | None, Exception]] = {}

    def check_ops(self) -> tuple[list, list]:
        """Reload every folder-based op with edited inputs. Returns what happened to the
        ops that changed, as (op, message), and the failures as (op, error)."""
        changes, failures = [], []
        for op in _loaded_ops():
            if _is_inline(op):
                continue
            known = self.failed.get(op.path)
            if known is not None and known[0] is not None and known[0] == _content_key(op):
                failures.append((op, known[1]))
                continue
            native = op.build
            try:
                reloaded = op.reload()
            except Exception as err:  # noqa: BLE001 - a build or import error of user code
                failures.append((op, err))
                if isinstance(err, BuildError) and err.file is not None:
                    self.failed[op.path] = (_content_key(op), err)
                continue
            self.failed.pop(op.path, None)
            if reloaded:
                what = _build_summary(op) if op.build is not native else "Python surface only"
                changes.append((op, f"reloaded op {op.name!r} ({what})"))
            elif self.reported.pop(op.path, None) is not None:
                changes.append((op, f"op {op.name!r} builds again; its sources match the build in use"))
        return changes, failures

    def _announce(self, changes: list[tuple[Op, str]]) -> None:
        for _op, message in changes:
            print(f"jit_loader: {message}", flush=True)

    def _report(self, op: Op, err: Exception) -> None:
        if isinstance(err, BuildError):
            first = str(err).splitlines()[0]
            lines = build_error_report(err, op.name)
        else:
            first = f"{type(err).__name__}: {err}"
            lines = [f"{_RED}{_BOLD}{first}{_RESET}",
                     f"reloading the Python surface of op {op.name!r} failed"]
        fallback = (f"this cell runs with the last good build of {op.name!r}" if op.build is not None
                    else f"op {op.name!r} has no working build yet")
        if self.reported.get(op.path) == first:
            print(f"jit_loader: op {op.name!r} still fails to build ({first}); {fallback}",
                  file=sys.stderr, flush=True)
            return
        self.reported[op.path] = first
        print("\n".join([*lines, fallback]), file=sys.stderr, flush=True)

    def pre_run_cell(self, info=None) -> None:
        if info is not None and (info.raw_cell or "").lstrip().startswith("%jit_reload"):
            return  # the magic does the same check and reports it as the cell's error
        changes, failures = self.check_ops()
        self._announce(changes)
        for op, err in failures:
            self._report(op, err)

    def jit_reload(self, line: str = "") -> None:
        """%jit_reload: rebuild the loaded ops whose sources changed now; a build error
        fails the cell (the op keeps its last good build)."""
        changes, failures = self.check_ops()
        self._announce(changes)
        if not changes and not failures:
            names = ", ".join(repr(op.name) for op in _loaded_ops()) or "none loaded"
            print(f"jit_loader: every op is up to date ({names})")
        for op, err in failures:
            self.reported[op.path] = str(err).splitlines()[0]
            if isinstance(err, BuildError):
                raise CellBuildError(err, op.name, f"op {op.name!r} keeps its last good build") from None
            raise err

    def jit_op(self, line: str, cell: str) -> None:
        """%%jit_op NAME [--cuda] [--verbose]: build the cell's C++ (CUDA) source as an op.

        The op is bound to NAME in the notebook (a ``Op``); its dispatcher ops
        are ``NAME.<op>`` and ``torch.ops.<namespace>.<op>``, a ``PYBIND11_MODULE``'s
        functions are ``NAME.<function>``. Re-running an edited cell replaces the op.
        Compiler errors name ``<cell NAME>`` and the line of the cell (the magic's line is 1).
        """
        args = _jit_op_parser().parse_args(shlex.split(line))
        name = args.name
        source_name = f"<cell {name}>"
        sources = {"cuda_source": cell} if args.cuda else {"cpp_source": cell}
        previous = self.ipython.user_ns.get(name)
        before = previous.build if isinstance(previous, Op) else None
        try:
            # The cell's first line is the %%jit_op line, so its body starts at line 2, as
            # Jupyter numbers the lines it shows.
            op_dir = pipeline.write_inline(name, first_line=2, source_name=source_name, **sources)
            op = Op(pipeline.load(op_dir, args.verbose or None))
        except ValueError as err:  # not a C identifier
            from IPython.core.error import UsageError
            raise UsageError(f"%%jit_op: {err}") from None
        except BuildError as err:
            if isinstance(previous, Op) and previous.build is not None:
                note = f"{name} still runs its previous build"
            else:
                note = f"{name} is not defined until the cell compiles"
            raise CellBuildError(err, name, note) from None
        self.ipython.user_ns[name] = op
        status = "unchanged" if before is not None and op.build is before else _build_summary(op)
        print(f"{name}: {status}; {_describe(op)}")


class _MagicArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        from IPython.core.error import UsageError
        raise UsageError(f"{self.format_usage().strip()}\n%%jit_op: {message}")


def _jit_op_parser() -> argparse.ArgumentParser:
    parser = _MagicArgumentParser(prog="%%jit_op", add_help=False)
    parser.add_argument("name", help="op name: a C identifier, bound in the notebook")
    parser.add_argument("--cuda", action="store_true", help="the cell is CUDA source (.cu)")
    parser.add_argument("--verbose", action="store_true", help="stream the compiler output")
    return parser


def _describe(op: Op) -> str:
    """What the op offers, e.g. ``torch.ops.toy.scale, toy.twice``."""
    parts = []
    for ns in op.namespaces:
        parts += [f"torch.ops.{ns}.{name}" for name in registry.ops_in(ns)]
    if op.extension is not None:
        parts += [f"{op.name}.{name}" for name in sorted(vars(op.extension))
                  if not name.startswith("_")]
    return ", ".join(parts) or "no ops registered"
