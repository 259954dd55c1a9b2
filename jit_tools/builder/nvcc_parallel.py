"""nvcc with the host half and the device half of a ``.cu`` compiled side by side.

nvcc compiles a ``.cu`` in one chain of steps (``nvcc --dryrun`` lists them):

    host side:   preprocess -> cudafe++ ......................... -> host compile
    device side:               preprocess -> cicc -> ptxas -> fatbinary  /

and runs them one after the other, because three links join the halves: cicc reads the
module id that cudafe++ writes, the host compile includes the device stubs that cicc
writes, and the host compile includes the fatbinary (as a C array). This driver runs
nvcc's own steps, unchanged but for those three links:

* the module id is written before either side starts (cudafe++ reads a given id instead
  of making one), so cudafe++ runs beside the device preprocessing and cicc;
* the host compile waits for cicc only (which writes the device stubs it includes), and
  stops at assembly (``-S``); the fatbinary enters the object when that is assembled, by
  ``.incbin`` of its bytes, so ptxas and fatbinary run beside the host compile.

The object holds the same bytes as nvcc's with the same module id (tests compare the two
in order and side by side). Anything this driver does not recognise (another nvcc
version's steps, relocatable device code, outputs other than an object) runs through
nvcc itself; so does a fatbinary whose C wrapper is not the one expected, whose host
compile is then run again in nvcc's order. Errors are printed as nvcc prints them: the
output of each step in nvcc's order, up to the first that failed.

Run as ``python nvcc_parallel.py NVCC ARGS...`` (the loader's ``nvcc`` shim does); it
needs only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import zlib

# The C wrapper nvcc's fatbinary writes around the device code (CUDA 12 and 13), with
# the ``asm`` lines of the data left out. The host compile includes this, with the
# data as an ``.incbin`` of a file that the device side fills in meanwhile.
_WRAPPER_HEAD = ('#ifndef __SKIP_INTERNAL_FATBINARY_HEADERS\n'
                 '#include "fatbinary_section.h"\n'
                 '#endif\n'
                 '#define __CUDAFATBINSECTION  ".nvFatBinSegment"\n'
                 '#define __CUDAFATBINDATASECTION  ".nv_fatbin"\n'
                 'asm(\n'
                 '".section .nv_fatbin, \\"a\\"\\n"\n'
                 '".align 8\\n"\n'
                 '"fatbinData:\\n"\n')
_WRAPPER_TAIL = ('".text\\n");\n'
                 '#ifdef __cplusplus\n'
                 'extern "C" {\n'
                 '#endif\n'
                 'extern const unsigned long long fatbinData[];\n'
                 '#ifdef __cplusplus\n'
                 '}\n'
                 '#endif\n'
                 '#ifdef __cplusplus\n'
                 'extern "C" {\n'
                 '#endif\n'
                 'static const __fatBinC_Wrapper_t __fatDeviceText __attribute__ ((aligned (8))) '
                 '__attribute__ ((section (__CUDAFATBINSECTION)))= \n'
                 '\t{ 0x466243b1, 1, fatbinData, 0 };\n'
                 '#ifdef __cplusplus\n'
                 '}\n'
                 '#endif\n')
_ARRAY_SIZE = re.compile(r"fatbinData\[\d+\]")


# The steps running now, stopped with this process; none starts once it is stopping.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.RLock()  # re-entrant: the handler may run while the main thread holds it
_STOPPING = threading.Event()


class Unrecognised(Exception):
    """nvcc's steps are not the shape this driver knows: let nvcc run them."""


class Step:
    def __init__(self, index: int, kind: str, argv: list[str]):
        self.index, self.kind, self.argv = index, kind, argv
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self.stdout = self.stderr = b""
        self.killed = False


def _expand(token: str, env: dict) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), os.environ.get(m.group(1), "")), token)


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``name VALUE`` or ``name=VALUE`` in argv."""
    for i, tok in enumerate(argv):
        if tok == name and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith(name + "="):
            return tok[len(name) + 1:]
    return None


def _replace_option(argv: list[str], name: str, value: str) -> list[str]:
    out = list(argv)
    for i, tok in enumerate(out):
        if tok == name and i + 1 < len(out):
            out[i + 1] = value
            return out
        if tok.startswith(name + "="):
            out[i] = f"{name}={value}"
            return out
    raise Unrecognised(f"no {name}")


def plan(nvcc: str, args: list[str], tmp: str) -> tuple[dict, list[Step], str | None]:
    """nvcc's steps for ``args`` (its temporary files inside ``tmp``), their environment,
    and the dependency file nvcc would write."""
    # nvcc's own --threads runs steps with their output redirected to files: this driver
    # does the running side by side itself.
    args = list(args)
    for name in ("--threads", "-t"):
        while name in args[:-1]:
            i = args.index(name)
            del args[i:i + 2]
    args = [a for a in args if not a.startswith(("--threads=", "-t="))]
    if any(a in ("-MT", "-MQ", "-MP", "-M", "-MM") or a.startswith(("-MT=", "-MQ=")) for a in args):
        raise Unrecognised("dependency options other than -MD/-MMD/-MF")
    proc = subprocess.run([nvcc, "--dryrun", *args], capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=tmp))
    if proc.returncode != 0:
        raise Unrecognised("nvcc --dryrun failed")
    env: dict[str, str] = {}
    steps: list[Step] = []
    depfile = None
    for line in proc.stderr.splitlines():
        if not line.startswith("#$ "):
            continue
        line = line[3:].strip()
        m = re.match(r"^([A-Za-z_]\w*)=(.*)$", line)
        if m:
            try:
                env[m.group(1)] = " ".join(shlex.split(m.group(2)))
            except ValueError:
                env[m.group(1)] = m.group(2).strip()
            continue
        m = re.match(r"^-- Filter Dependencies -- > (.*)$", line)
        if m:
            depfile = m.group(1).strip().strip('"')
            continue
        argv = shlex.split(line)
        if any(re.match(r"^\d?[<>|&;]", t) for t in argv):
            raise Unrecognised("shell redirection")
        argv[0] = _expand(argv[0], env)  # "$CICC_PATH/cicc"
        tool = os.path.basename(argv[0])
        if tool in ("cudafe++", "cicc", "ptxas", "fatbinary"):
            kind = tool
        elif tool == "rm":
            continue  # a temporary file: the whole folder goes at the end
        elif "-E" in argv:
            kind = "device-pre" if any(t.startswith("-D__CUDA_ARCH__=") for t in argv) else "host-pre"
        elif "-c" in argv:
            kind = "host-compile"
        else:
            raise Unrecognised(f"unknown step {tool}")
        steps.append(Step(len(steps), kind, argv))
    kinds = [s.kind for s in steps]
    if (kinds.count("host-pre") != 1 or kinds.count("cudafe++") != 1 or "cicc" not in kinds
            or kinds.count("fatbinary") != 1 or kinds.count("host-compile") != 1
            or kinds[-1] != "host-compile"):
        raise Unrecognised("steps: " + " ".join(kinds))
    cudafe = steps[kinds.index("cudafe++")]
    module_id = _option(cudafe.argv, "--module_id_file_name")
    if "--gen_module_id_file" not in cudafe.argv or module_id is None or any(
            _option(s.argv, "--module_id_file_name") != module_id for s in steps if s.kind == "cicc"):
        raise Unrecognised("module id")
    embedded = _option(steps[kinds.index("fatbinary")].argv, "--embedded-fatbin")
    compile_ = steps[-1]
    if embedded is None or _option(compile_.argv, "-o") is None:
        raise Unrecognised("outputs")
    if depfile is not None and "-MMD" in args:
        depfile = "-MMD:" + depfile  # user headers only, as nvcc -MMD writes them
    return env, steps, depfile


def _module_id(source: str) -> str:
    """An id of nvcc's shape: ``_<crc>_<length>_<name>_<random>_<pid>``."""
    name = os.path.basename(source)
    crc = zlib.crc32(os.path.abspath(source).encode()) & 0xFFFFFFFF
    return f"_{crc:08x}_{len(name)}_{re.sub(r'[^A-Za-z0-9]', '_', name)}_{secrets.token_hex(4)}_{os.getpid()}"


def _read_deps(path: str) -> list[str]:
    try:
        text = open(path).read()
    except OSError:
        return []
    text = text.replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    if not rest:
        _, _, rest = text.partition(":")
    deps, cur, i = [], "", 0
    while i < len(rest):
        c = rest[i]
        if c == "\\" and i + 1 < len(rest) and rest[i + 1] in " #":
            cur += rest[i + 1]
            i += 2
            continue
        if c.isspace():
            if cur:
                deps.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        deps.append(cur)
    return deps


def _write_deps(path: str, target: str, parts: list[list[str]]) -> None:
    seen, deps = set(), []
    for part in parts:
        for d in part:
            if d not in seen:
                seen.add(d)
                deps.append(d)
    esc = lambda p: p.replace(" ", "\\ ").replace("#", "\\#")
    with open(path, "w") as f:
        f.write(f"{esc(target)} : " + " \\\n    ".join(esc(d) for d in deps) + "\n")


def _wrapper_of(embedded_c: str, data_size: int) -> str | None:
    """The C wrapper fatbinary wrote, less its data lines (array size left out); None
    when those lines do not hold exactly ``data_size`` bytes (the binary fatbinary wrote
    beside it, which the assembler then takes)."""
    text = open(embedded_c).read()
    label = '"fatbinData:\\n"\n'
    start = text.find(label)
    end = text.find('".text\\n");', start)
    if start < 0 or end < 0 or data_size % 8 or text.count("0x", start, end) * 8 != data_size:
        return None
    start += len(label)
    return _ARRAY_SIZE.sub("fatbinData[]", text[:start] + text[end:])


class _Runner:
    """Runs steps (from several threads). After a failure, a step later in nvcc's order
    is not started, and one running is stopped."""

    def __init__(self, env: dict, steps: list[Step]):
        self.env, self.steps = env, steps
        self.lock = threading.Lock()
        self.failed: Step | None = None

    def start(self, step: Step) -> bool:
        with self.lock, _LIVE_LOCK:
            if _STOPPING.is_set() or (self.failed is not None and self.failed.index < step.index):
                step.killed = True
                return False
            step.proc = subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=self.env)
            _LIVE.add(step.proc)
        return True

    def wait(self, step: Step) -> bool:
        if step.proc is None:
            return False
        step.stdout, step.stderr = step.proc.communicate()
        step.returncode = step.proc.returncode
        with _LIVE_LOCK:
            _LIVE.discard(step.proc)
        if step.returncode != 0:
            with self.lock:
                if self.failed is None or step.index < self.failed.index:
                    self.failed = step
                for other in self.steps:
                    if (other.index > step.index and other.proc is not None
                            and other.proc.poll() is None):
                        other.killed = True
                        other.proc.kill()
            return False
        return not step.killed

    def run(self, step: Step) -> bool:
        return self.start(step) and self.wait(step)


def _report(steps: list[Step]) -> int:
    """Print the steps' output in nvcc's order up to the first failure; nvcc's status."""
    status = 0
    for step in sorted(steps, key=lambda s: s.index):
        if step.returncode is None:
            break
        sys.stdout.buffer.write(step.stdout)
        sys.stderr.buffer.write(step.stderr)
        if step.returncode != 0 and not step.killed:
            status = step.returncode
            break
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def compile_cu(nvcc: str, args: list[str], tmp: str, module_id: str | None = None,
               parallel: bool = True) -> int:
    """Compile as ``nvcc args`` would, with temporary files in ``tmp``; returns nvcc's
    status. ``parallel=False`` runs the same steps in nvcc's order (for comparison).
    Raises :class:`Unrecognised` before running anything it does not know."""
    env_vars, steps, depfile = plan(nvcc, args, tmp)
    env = dict(os.environ, **env_vars)
    by_kind = lambda k: [s for s in steps if s.kind == k]
    cudafe, fatbinary, compile_ = by_kind("cudafe++")[0], by_kind("fatbinary")[0], steps[-1]
    ciccs = by_kind("cicc")

    # 1. The module id, written first: cudafe++ reads it instead of making one.
    id_file = _option(cudafe.argv, "--module_id_file_name")
    source = _option(cudafe.argv, "--orig_src_path_name") or "unit.cu"
    with open(id_file, "w") as f:
        f.write(module_id or _module_id(source))
    cudafe.argv.remove("--gen_module_id_file")

    # 2. The fatbinary. Its C file goes aside; the host compile includes the wrapper with
    # the data as an .incbin of a file, and stops at assembly; the assembler reads the
    # data once the device side has written it.
    embedded = _option(fatbinary.argv, "--embedded-fatbin")
    data_file = os.path.join(tmp, "fatbin.bin")
    fatbinary.argv = _replace_option(fatbinary.argv, "--embedded-fatbin", embedded + ".nvcc")
    if _option(fatbinary.argv, "--create") is not None:
        raise Unrecognised("fatbinary --create")
    fatbinary.argv.append(f"--create={data_file}")
    with open(embedded, "w") as f:
        f.write(_WRAPPER_HEAD + f'".incbin \\"{data_file}\\"\\n"\n' + _WRAPPER_TAIL)
    output = _option(compile_.argv, "-o")
    assembly = os.path.join(tmp, "host.s")
    compile_.argv = _replace_option(compile_.argv, "-o", assembly)
    compile_.argv[compile_.argv.index("-c")] = "-S"
    assemble = Step(len(steps), "assemble", [
        compile_.argv[0], *[t for t in compile_.argv if t in ("-m64", "-m32")],
        "-c", "-x", "assembler", assembly, "-o", output])
    steps.append(assemble)

    # 3. Dependencies: every preprocessing pass writes its own; merged at the end.
    dep_parts = []
    if depfile:
        dep_flag = "-MMD" if depfile.startswith("-MMD:") else "-MD"
        depfile = depfile.removeprefix("-MMD:")
        for i, pre in enumerate(by_kind("host-pre") + by_kind("device-pre")):
            part = os.path.join(tmp, f"deps{i}.d")
            pre.argv[1:1] = [dep_flag, "-MF", part]
            dep_parts.append(part)

    known_wrapper = True

    def fatbin_data() -> None:
        """Whether the wrapper fatbinary wrote is the one the host compile included, its
        data the binary the assembler reads."""
        nonlocal known_wrapper
        try:
            wrapper = _wrapper_of(embedded + ".nvcc", os.path.getsize(data_file))
        except OSError:
            wrapper = None
        known_wrapper = wrapper == _WRAPPER_HEAD + _WRAPPER_TAIL

    runner = _Runner(env, steps)
    device = [s for s in steps if s.kind in ("device-pre", "cicc", "ptxas", "fatbinary")]
    if not parallel:
        ok = all(runner.run(s) for s in steps[:-1])
        if ok:
            fatbin_data()
    else:
        cicc_done = threading.Event()

        def host_chain():
            if all(runner.run(s) for s in by_kind("host-pre") + [cudafe]):
                cicc_done.wait()  # the device stubs the host compile includes
                if all(c.returncode == 0 for c in ciccs):
                    runner.run(compile_)

        def device_chain():
            try:
                for s in device:
                    if not runner.run(s):
                        return
                    if s is ciccs[-1]:
                        cicc_done.set()
                fatbin_data()
            finally:
                cicc_done.set()

        chains = [threading.Thread(target=host_chain), threading.Thread(target=device_chain)]
        for t in chains:
            t.start()
        for t in chains:
            t.join()
        ok = runner.failed is None
    if ok and not known_wrapper:
        # Not the wrapper this driver knows: the host compile again, in nvcc's order, with
        # nvcc's own file.
        shutil.copyfile(embedded + ".nvcc", embedded)
        compile_.returncode = compile_.proc = None
        ok = runner.run(compile_)
    if ok:
        runner.run(assemble)
    status = _report(steps)
    if status == 0 and depfile:
        _write_deps(depfile, output, [_read_deps(p) for p in dep_parts])
    return status


def _stop(signum, frame):
    """SIGTERM (Ninja stopping a build): stop the steps, then leave through ``finally``
    so that the temporary folder goes too."""
    with _LIVE_LOCK:
        _STOPPING.set()
        for proc in _LIVE:
            with contextlib.suppress(OSError):
                proc.kill()
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    nvcc, args = argv[0], argv[1:]
    signal.signal(signal.SIGTERM, _stop)
    tmp = tempfile.mkdtemp(prefix="nvcc-parallel-")
    try:
        try:
            return compile_cu(nvcc, args, tmp)
        except Unrecognised:
            return subprocess.run([nvcc, *args]).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
