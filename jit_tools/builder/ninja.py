"""Compiling one op: write its build.ninja (builder/ninja_file.py), run Ninja with a progress bar, turn a
failure into a BuildError whose first line is the first compiler error, and publish
the library into the store.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from jit_tools import key as keys, sources as src
from jit_tools.builder import ninja_file, toolchain
from jit_tools.errors import BuildError, JitLoaderError, SourcesChanged
from jit_tools.log import logger
from jit_tools.store import CacheStore

_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
_GCC_ERROR = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$")
_NVCC_ERROR = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$")


def first_error(log: str, local_dirs: Sequence[Path]) -> tuple[str, int, str] | None:
    """First compiler error in the log, preferring one located in the user's files: of
    the errors in the first such file, the one on its earliest line. A header that .cpp and
    .cu units share is compiled by g++ and by nvcc, whose front end reports a missing ';'
    where the parse fails, on the next line, and Ninja prints whichever compiler finished
    first; g++ names the line of the mistake."""
    found = []
    for raw in log.splitlines():
        m = _GCC_ERROR.match(raw) or _NVCC_ERROR.match(raw)
        if m:
            found.append((m.group("file"), int(m.group("line")), m.group("msg").strip()))
    if not found:
        return None
    local = [e for e in found if any(str(Path(e[0])).startswith(str(d) + os.sep) for d in local_dirs)]
    if not local:
        return found[0]
    first_file = os.path.normpath(local[0][0])
    return min((e for e in local if os.path.normpath(e[0]) == first_file), key=lambda e: e[1])


def _progress_unit(command: str) -> str:
    """The source file a Ninja command works on, for the progress bar."""
    m = re.search(r"-c (\S+)", command)
    if m:
        return os.path.basename(m.group(1))
    m = re.search(r"-o (\S+)", command)
    return "link " + os.path.basename(m.group(1)) if m else command[:40]


def _steps_to_run(work: Path) -> int | None:
    """How many steps Ninja will run (a dry run), so the bar knows its total at once."""
    try:
        proc = subprocess.run([toolchain.ninja(), "-n"], cwd=work, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, NINJA_STATUS="[%f/%t] "))
    except (OSError, subprocess.SubprocessError):
        return None
    steps = sum(1 for line in proc.stdout.splitlines() if _NINJA_STATUS.match(line))
    return steps or None


def _ninja_preexec() -> None:
    # If this process dies (SIGKILL, OOM), Ninja gets SIGTERM, stops its compilers and
    # deletes their partial outputs instead of running on as an orphan.
    ctypes.CDLL(None).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def run_ninja(name: str, work: Path, verbose: bool, lock_fd: int,
              local_dirs: Sequence[Path], cache_root: Path, extra_env: dict | None = None,
              progress: bool = True) -> str:
    """Run Ninja in ``work``; progress bar from its [k/n] lines; returns the log path.

    Ninja and its compilers inherit the build lock's descriptor, so the flock stays
    held until the last of them exits: a process that takes over after this one was
    killed never races a compiler still writing into the same folder.

    A step that failed without a word (a compiler killed, or one that exited non-zero
    and printed nothing) is not a mistake in the op's sources: its outputs are removed
    and Ninja runs once more, which redoes only the steps not done. A second failure is
    reported, a silent one as such.
    """
    log_path = work / "build.log"
    lines = _ninja_once(name, work, verbose, lock_fd, log_path, "w", extra_env, progress)
    if lines is None:
        return str(log_path)
    silent = silent_failures(lines)
    if silent:
        logger.warning("building %s: %s failed and printed nothing (a killed compiler? out of "
                       "memory?); running it once more", name, ", ".join(silent))
        for target in silent:
            with contextlib.suppress(OSError):
                (work / target).unlink()
        again = _ninja_once(name, work, verbose, lock_fd, log_path, "a", extra_env, progress)
        if again is None:
            return str(log_path)
        lines = again
    raise build_error(name, lines, _failure_code(lines), log_path, local_dirs, cache_root)


_FAILED = re.compile(r"^FAILED: (?:\[code=(\d+)\] )?(.*?)\s*$")


def _failure_code(lines: list[str]) -> int:
    codes = [int(m.group(1)) for m in map(_FAILED.match, lines) if m and m.group(1)]
    return codes[0] if codes else 1


def silent_failures(lines: list[str]) -> list[str]:
    """The outputs of the failed steps in Ninja's ``-v`` output, where no failed step
    printed anything (each FAILED line followed only by its command's echo); else []."""
    commands = {m.group(3).strip() for m in map(_NINJA_STATUS.match, lines) if m}
    targets, said = [], False
    in_failure = False
    for line in lines:
        m = _FAILED.match(line)
        if m:
            targets += m.group(2).split()
            in_failure = True
            continue
        if _NINJA_STATUS.match(line) or line.startswith("ninja: "):
            in_failure = False
            continue
        if in_failure and line.strip() and line.strip() not in commands:
            said = True
    return [] if said or not targets else targets


def _ninja_once(name: str, work: Path, verbose: bool, lock_fd: int, log_path: Path,
                mode: str, extra_env: dict | None, progress: bool) -> list[str] | None:
    """One run of Ninja, its output written to ``log_path`` (``mode`` "w" or "a"): None
    where it succeeded, else the lines it printed."""
    jobs = toolchain.max_jobs()
    cmd = [toolchain.ninja(), "-v", "-j", jobs]
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ", **(extra_env or {}))
    bar = None
    if not verbose and progress:  # no bar for a build in the background
        import warnings

        with warnings.catch_warnings():  # "IProgress not found" in a notebook without ipywidgets
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
        bar = tqdm(total=_steps_to_run(work), desc=f"building {name}", unit="step",
                   leave=False, file=sys.stderr, dynamic_ncols=True)
    try:
        proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, text=True, errors="replace", start_new_session=True,
                                pass_fds=(lock_fd,), preexec_fn=_ninja_preexec)
    except FileNotFoundError as e:
        if bar is not None:
            bar.close()
        raise JitLoaderError("ninja was not found; pip install ninja") from e
    lines: list[str] = []
    try:
        with open(log_path, mode) as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()  # readable while the build runs, and complete up to a kill
                lines.append(line)
                if verbose:
                    print(line, end="", flush=True)
                elif bar is not None:
                    m = _NINJA_STATUS.match(line)
                    if m:
                        done, total = int(m.group(1)), int(m.group(2))
                        bar.total = total
                        bar.n = done  # Ninja reports a step when it finishes
                        bar.set_postfix_str(_progress_unit(m.group(3)), refresh=False)
                        bar.refresh()
        proc.wait()
    except BaseException:
        # Ctrl-C or any error: stop the whole compiler tree, leave no orphan writing.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)  # Ninja stops its compilers and removes partial outputs
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        proc.wait()
        raise
    finally:
        if bar is not None:
            bar.close()
    return None if proc.returncode == 0 else lines


_INCLUDED_FROM = re.compile(r"^(?:In file included| {5,}) from (?P<file>[^\s:][^:]*):\d+[:,]")
_CONTEXT = re.compile(r"^(?P<file>[^\s:][^:]*):(?:\d+:)*\s+(?:required (?:from|by)|"
                      r"in (?:expansion|definition) of macro|note: in (?:expansion|definition) of macro)")
_SNIPPET = re.compile(r"^ *\d* \| ")
_FILE = re.compile(r"^(?P<file>[^\s:][^:]*):")


def _is_local(file: str, local_dirs: Sequence[Path]) -> bool:
    return any(file.startswith(str(d) + os.sep) for d in local_dirs)


def user_lines(output: list[str], local_dirs: Sequence[Path]) -> list[str]:
    """The compiler's output less the context that lies outside the user's files: a chain
    of "In file included from" that starts in torch's headers and leads to a message about
    the user's file (g++ prints one before an error inside an ``AT_DISPATCH`` lambda), and
    torch's "required from" / macro notes with their source snippets. Errors anywhere, the
    chain that leads to an error in a torch header, and every line about the user's files
    stay."""
    kept: list[str] = []
    chain: list[str] = []
    dropping = False
    for line in output:
        m = _INCLUDED_FROM.match(line)
        if m:
            chain.append(line)
            continue
        if chain:  # a chain ends at the first line that is not part of it
            about = _FILE.match(line)
            if (_is_local(_INCLUDED_FROM.match(chain[0]).group("file"), local_dirs)
                    or not (about and _is_local(about.group("file"), local_dirs))):
                kept += chain
            chain = []
        m = _CONTEXT.match(line)
        if m and not _is_local(m.group("file"), local_dirs):
            dropping = True
            continue
        if dropping and _SNIPPET.match(line):
            continue
        dropping = False
        kept.append(line)
    return kept + chain


def build_error(name, lines, returncode, log_path, local_dirs, cache_root) -> BuildError:
    log = "".join(lines)
    err = first_error(log, local_dirs)
    if err:
        file, line, msg = err
        first = f"{file}:{line}: {msg}"
    else:
        failed = [l.strip() for l in lines
                  if re.search(r"error|undefined reference|cannot find", l, re.IGNORECASE)
                  and not l.startswith(("FAILED", "ninja:", "collect2"))]
        silent = silent_failures(lines)
        first = (failed[0] if failed else
                 f"{', '.join(silent)}: the step exited with status {returncode} and printed "
                 "nothing, twice (a killed compiler? out of memory?)" if silent else
                 f"ninja exited with status {returncode}")
        file = line = None
    if "No space left on device" in log:
        first += f"  [disk full: free space in {cache_root} or set JIT_LOADER_CACHE]"
    # Ninja -v echoes each command, and again after FAILED: keep the compiler's own
    # output (the full log has the commands).
    commands = {m.group(3).strip() for m in map(_NINJA_STATUS.match, lines) if m}
    output = [l for l in lines if not _NINJA_STATUS.match(l) and l.strip() not in commands]
    tail = "".join(user_lines(output, local_dirs)[-30:])
    return BuildError(f"{first}\nbuilding op {name!r} failed; full log: {log_path}\n{tail}",
                      log_path=str(log_path), file=file, line=line, log=log)


# ---- objects that match their inputs' contents, whatever the timestamps ------------------
#
# Ninja rebuilds an object when an input is newer than it. That misses a file restored
# with its old modification time (cp -p, git stash, an editor's backup) and a file edited
# after the compiler read it but within the same timestamp tick. The working folder
# therefore keeps STAMP: the content hash of every input as of the objects in it. Before
# Ninja runs, each object that depends (by Ninja's own deps log) on an input whose content
# differs from the stamp is deleted; an input under way is stamped None, so a build that
# dies midway leaves its objects marked stale.

STAMP = "inputs.json"


def _read_stamp(work: Path) -> dict | None:
    try:
        stamp = json.loads((work / STAMP).read_text())
        return stamp if isinstance(stamp, dict) else None
    except (OSError, ValueError):
        return None


def _write_stamp(work: Path, stamp: dict) -> None:
    tmp = work / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp, sort_keys=True))
    os.replace(tmp, work / STAMP)


def _object_deps(work: Path) -> dict[Path, set[str]]:
    """Each target of the working folder's deps log and the real paths it depends on."""
    proc = subprocess.run([toolchain.ninja(), "-t", "deps"], cwd=work, capture_output=True,
                          text=True, errors="replace")
    deps: dict[Path, set[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line and not line[0].isspace():
            target = line.split(":", 1)[0]
            current = deps.setdefault(work / target, set())
        elif line.strip() and current is not None:
            current.add(os.path.realpath(os.path.join(work, line.strip())))
    return deps


def _mtimes(paths) -> dict[str, int | None]:
    out = {}
    for p in paths:
        try:
            out[p] = os.stat(p).st_mtime_ns
        except OSError:
            out[p] = None
    return out


def invalidate_stale_objects(work: Path, hashes: dict[str, str]) -> list[Path]:
    """Delete the objects whose inputs' contents differ from the stamp; stamp the
    changed inputs as unknown until a build succeeds. Returns the deleted objects."""
    stamp = _read_stamp(work)
    objects = [p for p in work.glob("*.o")]
    if stamp is None:
        stale = objects  # no record of what they were compiled from
        changed: set[str] = set(hashes)
    else:
        changed = {p for p in set(stamp) | set(hashes) if stamp.get(p) != hashes.get(p)}
        stale = []
        if changed and objects:
            stale = [obj for obj, deps in _object_deps(work).items()
                     if obj.suffix == ".o" and deps & changed]
    for obj in stale:
        with contextlib.suppress(FileNotFoundError):
            obj.unlink()
    _write_stamp(work, {p: (None if p in changed else h) for p, h in hashes.items()})
    return stale


def work_tag(op_dir: Path, config: dict) -> str:
    """The name of the op's Ninja work folder for a configuration (one per op folder and
    configuration, kept for incremental rebuilds; ``CacheStore.claim_work`` takes it)."""
    cfg = {k: v for k, v in config.items() if k != "no_cuda_reason"}
    return hashlib.sha256((json.dumps(cfg, sort_keys=True) + str(op_dir)).encode()).hexdigest()[:12]


def build(store: CacheStore, name: str, op_dir: Path, opts: dict, key: str, config: dict,
          sources: list[Path], verbose: bool, lock_fd: int,
          hashes: dict[str, str] | None = None, progress: bool = True,
          extra_manifest: dict | None = None) -> tuple[dict, str]:
    """Compile in the op's Ninja working folder, then publish the library into the
    store under ``key``. Caller holds the build lock. Returns (manifest, log path).

    ``hashes`` (real path -> content hash of every input, as the key saw them) makes
    the build content-exact: objects of changed inputs are recompiled whatever their
    timestamps, and if any input changes while the compilers run, nothing is published
    (:class:`SourcesChanged`; the caller computes the new key and builds again).

    Ninja runs in a work folder this process alone has claimed (``CacheStore.claim_work``),
    so that it is never another process's, whatever the build lock locked."""
    started = time.perf_counter()
    try:
        claim = store.claim_work(name, work_tag(op_dir, config))
    except OSError as e:
        raise store.cache_error(e, f"building op {name!r}") or e
    try:
        manifest = _build_in(claim.folder, store, name, op_dir, opts, key, config, sources,
                             verbose, lock_fd, hashes, progress, extra_manifest, started)
    except BuildError as e:  # its log now lies where the work folder is given back to
        e.args = (claim.path(e.args[0]),) + e.args[1:]
        e.log_path = claim.path(e.log_path)
        raise
    finally:
        given_back = claim.release() == claim.shared
    # The work folder's log; where another process's folder took its place, the build's own.
    log = (claim.shared if given_back else store.entry(name, key)) / "build.log"
    return manifest, str(log)


def _build_in(work: Path, store: CacheStore, name: str, op_dir: Path, opts: dict, key: str,
              config: dict, sources: list[Path], verbose: bool, lock_fd: int,
              hashes: dict[str, str] | None, progress: bool, extra_manifest: dict | None,
              started: float) -> dict:
    try:
        flags = ninja_file.torch_flags(name, config, sources, work)
        pieces = ninja_file.choose_pieces(flags, config, [op_dir], store.root)
        ninja_file.write(work, name, flags, pieces,
                         [p for p in sources if not src.is_cuda_source(p, name)],
                         ninja_file.units_of(sources, src.include_dirs(op_dir, opts),
                                             config.get("cpu_clone", ())))
        if hashes is not None:
            mtimes = _mtimes(hashes)
            # Inputs edited since the key was computed (a background build that an edit
            # overtook): the build could not be published, and compiling the edited
            # units now would only mark them unknown for the build of the new key.
            moved = sorted(p for p, h in keys.input_hashes(hashes).items() if h != hashes[p])
            if moved:
                raise SourcesChanged(f"op {name!r}: {', '.join(moved)} changed before it compiled")
            invalidate_stale_objects(work, hashes)
        log_path = run_ninja(name, work, verbose, lock_fd, src.include_dirs(op_dir, opts),
                             store.root, pieces.env, progress)
        if hashes is not None:
            # A file written during the build (even back to its old content, which the
            # compiler may not have seen) leaves its objects suspect.
            after, mtimes_after = keys.input_hashes(hashes), _mtimes(hashes)
            moved = sorted(p for p, h in hashes.items()
                           if after.get(p) != h or mtimes_after[p] != mtimes[p])
            _write_stamp(work, {p: (None if p in moved else h) for p, h in hashes.items()})
            if moved:
                raise SourcesChanged(
                    f"op {name!r}: {', '.join(moved)} changed while it compiled; "
                    "the build was not published")
        pieces.read_log(Path(log_path))
        if pieces.later:  # the shared pieces this build went without, for the next
            ninja_file.build_later(pieces.spec)
        manifest = store.publish(name, key, work / f"{name}.so", Path(log_path), {
            "op_dir": str(op_dir),
            "sources": [str(s) for s in sources],
            "options": opts,
            "config": config,
            "created": time.time(),
            "build_seconds": round(time.perf_counter() - started, 3),
            "shared": pieces.record(),
            **(extra_manifest or {}),
        })
    except OSError as e:
        explained = store.cache_error(e, f"building op {name!r}")
        if explained is not None:
            raise explained from e
        raise
    return manifest
