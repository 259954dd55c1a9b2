"""The op's ``build.ninja``, written once from the final command lines.

Two inputs make them. :func:`torch_flags`: the compile and link flags torch's
``cpp_extension.load`` composes for the op (include folders, nvcc arch flags, torch's
libraries; ``_torch_private.ninja_flags``) from the loader's configuration (``key.config``),
as lists. :func:`choose_pieces`: the shared pieces the build uses (precompiled header,
gold, ccache, the nvcc shim; :mod:`jit_tools.builder.speedups`) and those it goes without.
:func:`write` puts both on the lines of the file; nothing reads the file back.

The command lines do not change when the pieces appear (Ninja recompiles a unit whose
command changed, and the pieces change no object): the precompiled header's flags sit in
the options file ``pieces.rsp`` (empty until the header exists) and ccache is on the line
from the first build on, switched off by ``CCACHE_DISABLE`` until the pieces exist. The
first edit after they appear recompiles the edited unit only.

A flag set's first build is all cache misses and often a one-off, and a precompiled header
takes longer than a tiny op: so a build uses the pieces that exist and, once it has
succeeded, starts the missing ones in a background process (:func:`build_later`) at low
priority. ``JIT_LOADER_SHARED_NOW=1`` builds them first instead (the test suite, which
builds many ops with one toolchain, does).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jit_tools import _torch_private, key as keys, sources as src
from jit_tools.builder import shared, speedups, toolchain
from jit_tools.builder.speedups import HeaderSet
from jit_tools.errors import JitLoaderError
from jit_tools.store import CacheStore

PIECES_RSP = "pieces.rsp"
FLAGS_FILE = "torch_flags.json"
# What torch's flags read from the environment besides our arguments.
_TORCH_ENV = ("CXX", "CC", "PYTORCH_NVCC", "TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES",
              "CUDNN_HOME", "CUDNN_PATH", "CUDA_INC_PATH", "TORCH_DONT_CHECK_COMPILER_ABI")


@dataclasses.dataclass(frozen=True)
class TorchFlags:
    """The op's compile and link flags as torch composes them (each list of shell words,
    joined by spaces on the command line, as torch writes them)."""
    cflags: list[str]
    post_cflags: list[str]
    cuda_cflags: list[str] | None  # None: no CUDA unit
    cuda_post_cflags: list[str]
    cuda_dlink_post_cflags: list[str]
    ldflags: list[str]
    sources: list[str]
    objects: list[str]
    library: str


def torch_flags(name: str, config: dict, sources: list[Path], work: Path) -> TorchFlags:
    """torch's flags for the op, with the registry header (the macros that defer
    registration, the loader's entry points) force-included into every C++ unit. Kept in
    ``work`` with what they were made from: an edit of a source (the same inputs) spares
    importing ``torch.utils.cpp_extension``, which imports setuptools, a few tenths of a
    second of each first rebuild in a process."""
    objects: dict[str, Path] = {}
    for source in sources:
        stem = source.stem + (".cuda" if source.suffix in src.CUDA_SUFFIXES else "")
        if stem in objects:
            raise JitLoaderError(
                f"op {name!r}: sources {objects[stem]} and {source} would both compile to "
                f"{stem}.o; rename one of them")
        objects[stem] = source
    force = [f"-include {shlex.quote(str(keys.registry_header(config)))}"]  # reaches a shell
    cflags = [*force, *config["cflags"]]
    # A torch-free .cu (kernels and launchers only) must stay torch-free: the header pulls
    # in torch/library.h, which costs nvcc most of its time. It is needed only where a .cu
    # registers with the dispatcher itself, or where no C++ unit would define the
    # loader's entry points.
    cuda = [p for p in sources if p.suffix in src.CUDA_SUFFIXES]
    cuda_registers = len(cuda) == len(sources) or any(b"TORCH_LIBRARY" in p.read_bytes() for p in cuda)
    cuda_cflags = [*(force if cuda_registers else []), *config["cuda_cflags"]]
    ldflags = [*config["ldflags"], *(["-fopenmp"] if "-fopenmp" in config["cflags"] else [])]
    inputs = {"name": name, "config": config, "sources": [str(s) for s in sources],
              "cflags": cflags, "cuda_cflags": cuda_cflags, "ldflags": ldflags,
              "env": {v: os.environ.get(v) for v in _TORCH_ENV},
              "cuda_home": toolchain.cuda_home() if config["with_cuda"] else None}
    saved = work / FLAGS_FILE
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        doc = json.loads(saved.read_text())
        if doc["inputs"] == json.loads(json.dumps(inputs)):
            return TorchFlags(**doc["flags"])
    cx = toolchain.cpp_extension()
    # torch reads the arch list from the environment and the toolkit from a module
    # global; set both for this call only.
    env_backup, home_backup = os.environ.get("TORCH_CUDA_ARCH_LIST"), cx.CUDA_HOME
    try:
        if config["with_cuda"]:
            os.environ["TORCH_CUDA_ARCH_LIST"] = config["cuda_arch"]
            cx.CUDA_HOME = toolchain.cuda_home()
        written = _torch_private.ninja_flags(
            cx, path=str(work / "build.ninja"), name=name, sources=[str(s) for s in sources],
            extra_cflags=cflags, extra_cuda_cflags=cuda_cflags, extra_sycl_cflags=[],
            extra_ldflags=_torch_private.prepare_ldflags(cx, ldflags, config["with_cuda"]),
            extra_include_paths=config["include_dirs"], with_cuda=config["with_cuda"],
            with_sycl=False, is_standalone=False)
    finally:
        cx.CUDA_HOME = home_backup
        if env_backup is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = env_backup

    def words(flags) -> list[str]:
        return [f.strip() for f in flags or ()]

    flags = TorchFlags(
        cflags=words(written["cflags"]), post_cflags=words(written["post_cflags"]),
        cuda_cflags=words(written["cuda_cflags"]) if written["with_cuda"] else None,
        cuda_post_cflags=words(written["cuda_post_cflags"]),
        cuda_dlink_post_cflags=words(written["cuda_dlink_post_cflags"]),
        ldflags=words(written["ldflags"]), sources=[os.path.abspath(s) for s in written["sources"]],
        objects=list(written["objects"]), library=written["library_target"])
    tmp = saved.with_name(f".{saved.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"inputs": inputs, "flags": dataclasses.asdict(flags)}))
    os.replace(tmp, saved)
    return flags


@dataclasses.dataclass
class PieceSpec:
    """One flag set's pieces, as a background process builds them (``to_json``)."""
    root: str
    cxx: str
    flags: list[str]  # the C++ units' flags less the op's own (speedups.pch_flags)
    post: str
    ldflags: str
    headers: HeaderSet = speedups.ATEN_HEADERS
    # The other ABI's header set for the same folders and options (speedups.other_abi).
    other_flags: list[str] | None = None
    other_headers: HeaderSet | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "PieceSpec":
        doc = json.loads(text)
        for field in ("headers", "other_headers"):
            if doc.get(field) is not None:
                doc[field] = HeaderSet(**doc[field])
        return cls(**doc)


@dataclasses.dataclass
class Pieces:
    """The shared pieces one build uses, and the ones it goes without."""
    spec: PieceSpec
    ccache: str | None = None  # on the compilers' lines
    env: dict = dataclasses.field(default_factory=dict)  # ccache's settings, or CCACHE_DISABLE
    pch: Path | None = None  # the header set (its .gch beside it)
    pch_sibling: str | None = None  # the piece of another flag set's header set, used instead
    linker: list[str] = dataclasses.field(default_factory=list)  # gold's flags, once probed
    gold_else_default: bool = False  # not probed yet: try gold, else the default linker
    nvcc: str | None = None  # the nvcc the CUDA lines run: the shim, else nvcc itself
    nvcc_parallel: bool = False  # the shim, which runs nvcc's halves side by side
    nvcc_threads: int = 0
    later: list[str] = dataclasses.field(default_factory=list)  # built after the build
    if_refused: list[str] = dataclasses.field(default_factory=list)  # ... if GCC refuses the sibling
    sibling_refused: bool = False

    def read_log(self, log: Path) -> None:
        """After the build: where GCC read the sibling header's text (a macro conflict),
        this flag set needs a header of its own, built later."""
        if self.if_refused and speedups.sibling_refused(log.read_text(errors="replace")):
            self.sibling_refused = True
            self.later = sorted({*self.later, *self.if_refused})

    def record(self) -> dict:
        """What the build used, for its manifest (``shared``)."""
        used = {"ccache": self.ccache is not None and "CCACHE_DISABLE" not in self.env,
                "pch": self.pch is not None,
                "linker": "gold" if self.linker else "gold, else default" if self.gold_else_default
                else "default"}
        if self.pch_sibling:
            used["pch_sibling"] = self.pch_sibling
        if self.sibling_refused:
            used["pch_sibling_refused"] = True
        if self.later:
            used["later"] = self.later
        if self.nvcc_parallel:
            used["nvcc"] = "parallel"
        if self.nvcc_threads:
            used["nvcc_threads"] = self.nvcc_threads
        return used


def choose_pieces(flags: TorchFlags, config: dict, private_dirs, root: Path) -> Pieces:
    """The pieces a build with ``flags`` uses: those built before (all of them, built now,
    with ``JIT_LOADER_SHARED_NOW=1``); the others are named in ``later``."""
    cxx = toolchain.unwrap(toolchain.cxx_compiler())
    unit_flags = speedups.pch_flags(flags.cflags, config["name"], private_dirs)
    other = speedups.other_abi(unit_flags)
    spec = PieceSpec(root=str(root), cxx=cxx, flags=unit_flags, post=" ".join(flags.post_cflags),
                     ldflags=" ".join(flags.ldflags), headers=speedups.header_set(config),
                     other_flags=other[0] if other else None, other_headers=other[1] if other else None)
    pieces = Pieces(spec)
    if shared.build_now():
        pieces.pch, pieces.linker = _pieces_now(spec)
    else:
        pieces.pch, pieces.linker, pieces.later = _pieces_built(spec)
    # ccache joins from a flag set's second build, as the other pieces do: the first
    # build of a flag set (often a one-off) is all misses, on each of which ccache hashes
    # every header the unit read and stores the object. It stays on the command line,
    # switched off, so that the commands are the same once the pieces exist.
    pieces.ccache = speedups.ccache()
    if pieces.ccache and pieces.later:
        pieces.env = {"CCACHE_DISABLE": "1"}
    elif pieces.ccache:
        pieces.env = speedups.ccache_env(root)
    if pieces.pch is None and pieces.later and (sibling := speedups.sibling_header(
            root, cxx, spec.flags, spec.post, spec.headers)):
        # The exact header is built only if GCC turns the sibling down.
        pieces.pch, pieces.pch_sibling = sibling, sibling.parent.name
        pieces.if_refused = [m for m in pieces.later if m.startswith("pch-")]
        pieces.later = [m for m in pieces.later if m not in pieces.if_refused]
    pieces.gold_else_default = (any(m.startswith("link-") for m in pieces.later)
                                and speedups.gold_enabled(cxx))
    if config["with_cuda"]:
        nvcc = toolchain.nvcc_command()
        shim = speedups.parallel_nvcc(root, nvcc)
        pieces.nvcc, pieces.nvcc_parallel = (shlex.quote(shim), True) if shim else (nvcc, False)
        pieces.nvcc_threads = speedups.nvcc_threads()
    return pieces


def _pieces_now(spec: PieceSpec) -> tuple[Path | None, list[str]]:
    """(pch, linker) built where missing; the header and the linker probe side by side
    (each under its own lock) unless MAX_JOBS=1."""
    root = Path(spec.root)
    with ThreadPoolExecutor(1) as pool:
        def make_linker():
            return speedups.fast_linker(root, spec.cxx, spec.ldflags)
        link_job = pool.submit(make_linker) if toolchain.max_jobs() != "1" else None
        pch = speedups.precompiled_header(root, spec.cxx, spec.flags, spec.post, spec.headers)
        linker = link_job.result() if link_job is not None else make_linker()
    return pch, linker


def _pieces_built(spec: PieceSpec) -> tuple[Path | None, list[str], list[str]]:
    """(pch, linker, names of the missing pieces): only pieces built before."""
    root, missing = Path(spec.root), []
    pch, linker = None, []
    try:
        pch = speedups.precompiled_header(root, spec.cxx, spec.flags, spec.post, spec.headers, now=False)
    except shared.Missing as e:
        missing.append(str(e))
    try:
        linker = speedups.fast_linker(root, spec.cxx, spec.ldflags, now=False)
    except shared.Missing as e:
        missing.append(str(e))
    return pch, linker, missing


@dataclasses.dataclass(frozen=True)
class Unit:
    """How a C++ unit compiles, besides the op's flags: ``plain`` (torch-free,
    :func:`jit_tools.sources.torch_free`: without the precompiled header and the registry
    header), ``slices`` (objects side by side, ``-DOPS_CPU_SLICE=k`` each;
    :func:`jit_tools.sources.dtype_slices`) and ``defines``, flags of its own (the CPU clone's,
    for a unit that reaches ops/common/cpu_dispatch.h)."""
    plain: bool = False
    slices: int = 1
    defines: tuple[str, ...] = ()


CPU_DISPATCH = "common/cpu_dispatch.h"  # what reads OPS_CPU_CLONE (key.cpu_clone_flags)


def units_of(sources: list[Path], include_dirs, clone_flags=()) -> dict[str, Unit]:
    """The :class:`Unit` of each C++ source that compiles otherwise than with the op's
    flags, by absolute path. Where every C++ unit is plain, the first keeps the registry
    header: it defines the loader's entry points. ``clone_flags`` (the configuration's
    ``cpu_clone``) go to the units that reach cpu_dispatch.h, and to no other: a unit that
    does not read them compiles the same on every capability."""
    cpp = [p for p in sources if p.suffix not in src.CUDA_SUFFIXES]
    plain = [src.torch_free(p, include_dirs) for p in cpp]
    if plain and all(plain):
        plain[0] = False
    units = {os.path.abspath(p): Unit(free, src.dtype_slices(p),
                                      tuple(clone_flags) if clone_flags and src.reaches(
                                          p, CPU_DISPATCH, include_dirs) else ())
             for p, free in zip(cpp, plain)}
    return {path: unit for path, unit in units.items() if unit != Unit()}


def write(work: Path, name: str, flags: TorchFlags, pieces: Pieces, cpu_sources: list[Path],
          units: dict[str, Unit] | None = None) -> None:
    """``work/build.ninja`` (and the precompiled header's options file) with the final
    command lines. ``cpu_sources``: the units of the CPU side alone, linked as the target
    ``<name>.cpu.so`` that a live edit's CPU kernels are built from (jit_tools/swap/cpu_link.py)
    where they are not all the units. ``units``: the C++ units that compile otherwise
    (:func:`units_of`)."""
    units = units or {}
    launcher = [shlex.quote(pieces.ccache)] if pieces.ccache else []
    # First on the line: a precompiled header must come before any other token. Read by
    # the compiler from a file (GCC's and ccache's @file), so that the units' commands
    # stay the same whether the header exists yet or not.
    (work / PIECES_RSP).write_text(
        f"-include {shlex.quote(str(pieces.pch))} -Winvalid-pch\n" if pieces.pch is not None else "")
    # Named relative to the work folder, where Ninja runs: the folder's name differs
    # in each process that claims it (CacheStore.claim_work), the command must not.
    cflags = ["@" + PIECES_RSP, *flags.cflags]
    lines = ["ninja_required_version = 1.3",
             "cxx = " + " ".join([*launcher, pieces.spec.cxx])]
    cuda = flags.cuda_cflags is not None
    if cuda:
        lines.append("nvcc = " + " ".join([*launcher, pieces.nvcc]))
    lines += ["", "cflags = " + " ".join(cflags), "post_cflags = " + " ".join(flags.post_cflags)]
    if cuda:
        threads = [f"--threads {pieces.nvcc_threads}"] if pieces.nvcc_threads else []
        lines += ["cuda_cflags = " + " ".join([*threads, *flags.cuda_cflags]),
                  "cuda_post_cflags = " + " ".join(flags.cuda_post_cflags)]
    lines += ["cuda_dlink_post_cflags = " + " ".join(flags.cuda_dlink_post_cflags),
              "ldflags = " + " ".join([*pieces.linker, *flags.ldflags]), "",
              "rule compile", "  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags",
              "  depfile = $out.d", "  deps = gcc", ""]
    if cuda:
        lines.append("rule cuda_compile")
        gendeps = ""
        if os.getenv("TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES", "0") != "1":
            lines += ["  depfile = $out.d", "  deps = gcc"]
            gendeps = "-MD -MF $out.d "
        lines += [f"  command = $nvcc {gendeps}$cuda_cflags -c $in -o $out $cuda_post_cflags", ""]
    objects = []
    if flags.cuda_dlink_post_cflags:
        lines += ["rule cuda_devlink", "  command = $nvcc $in -o $out $cuda_dlink_post_cflags", ""]
    link = "$cxx $in $ldflags -o $out"
    if pieces.gold_else_default:
        # Before the linker probe has run (a toolchain's first build): gold, and where gold
        # fails the default linker (whose messages are the ones shown). The first build links
        # as fast as later ones without waiting for the probe; the probe, built after it,
        # spares later builds the failed try where gold does not work.
        link = f"$cxx $in {speedups.GOLD} $ldflags -o $out 2>/dev/null || {link}"
    lines += ["rule link", f"  command = {link}", ""]
    plain_cflags = shlex.join(speedups.without_registry(flags.cflags))
    unit_objects: dict[str, list[str]] = {}
    for source, obj in zip(flags.sources, flags.objects):
        rule = "cuda_compile" if obj.endswith(".cuda.o") else "compile"  # torch's naming
        unit = units.get(source, Unit()) if rule == "compile" else Unit()
        outs = [obj] if unit.slices == 1 else [f"{obj[:-2]}.slice{k}.o" for k in range(unit.slices)]
        for k, out in enumerate(outs):
            lines.append(f"build {_escape(out)}: {rule} {_escape(source)}")
            own = ([plain_cflags] if unit.plain else
                   [" ".join(cflags)] if unit.slices > 1 or unit.defines else [])
            if own:
                slice_flag = [f"-DOPS_CPU_SLICE={k}"] if unit.slices > 1 else []
                lines.append("  cflags = " + " ".join(own + list(unit.defines) + slice_flag))
        unit_objects[source] = outs
        objects += outs
    if flags.cuda_dlink_post_cflags:
        lines.append(f"build dlink.o: cuda_devlink {' '.join(map(_escape, objects))}")
        objects.append("dlink.o")
    lines.append(f"build {flags.library}: link {' '.join(map(_escape, objects))}")
    cpu = {os.path.abspath(p) for p in cpu_sources}
    cpu_objects = [o for s in flags.sources if s in cpu for o in unit_objects[s]]
    if cuda and cpu_objects and len(cpu_objects) < sum(map(len, unit_objects.values())):
        lines.append(f"build {name}.cpu.so: link {' '.join(map(_escape, cpu_objects))}")
    lines += ["", f"default {flags.library}", ""]
    (work / "build.ninja").write_text("\n".join(lines))


def _escape(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def build_later(spec: PieceSpec):
    """Build the pieces of ``spec`` in a detached background process at low priority
    (after the op's own build, so that they never delay it); the process, or None."""
    return shared.background(spec.to_json(), __name__)


def _main(argv: list[str]) -> int:
    """``python -m jit_tools.builder.ninja_file SPEC``: the background build of
    ``build_later``. One at a time per folder of pieces: builds that finish while it runs
    (each starts one) leave their pieces to the next build's background process instead
    of queueing."""
    spec = PieceSpec.from_json(argv[0])
    folder = CacheStore(Path(spec.root)).shared_folder()
    folder.mkdir(parents=True, exist_ok=True)
    with shared.held_alone(folder / "background.lock") as alone:
        if not alone:
            return 0
        with contextlib.suppress(OSError):
            os.nice(10)
        _pieces_now(spec)
        if spec.other_flags is not None:
            speedups.precompiled_header(Path(spec.root), spec.cxx, spec.other_flags, spec.post,
                                        spec.other_headers)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
