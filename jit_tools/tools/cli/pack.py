"""``python -m jit_loader pack``: the builds some ops need, in one verifiable bundle
(jit_tools/tools/bundle.py), built first where the cache lacks them."""

from __future__ import annotations

import sys
from pathlib import Path

from jit_tools import sources
from jit_tools.errors import OpNotFoundError
from jit_tools.tools import bundle
from jit_tools.tools.cli import build, text

NAME = "pack"
HELP = "write the builds some ops need into one bundle that `unpack` installs (e.g. on a cluster)"
DESCRIPTION = """\
Write the builds that the named ops need (building any the cache lacks; no GPU needed) into
OUT.tar.gz, with a manifest naming each build's key inputs (torch or stable target version,
CUDA, compilers, arch list, flags, each source's sha256) and each file's sha256. Without OP,
every op the cache holds a current build of. `python -m jit_loader unpack OUT.tar.gz` installs
it as a cache layer; with JIT_LOADER_COMPILE=never a node then loads the ops without a compiler.
A bundle of stable-ABI ops serves every torch from their target version on."""
EPILOG = """\
example (a login node, then every node):
  JIT_LOADER_CUDA_ARCH=9.0 python -m jit_loader pack ops.tar.gz sigmoid gelu --cuda-arch 9.0
  python -m jit_loader unpack ops.tar.gz --into /shared/jit-ops
  export JIT_LOADER_CACHE=/shared/jit-ops:/tmp/jit-cache JIT_LOADER_COMPILE=never JIT_LOADER_CUDA_ARCH=9.0
  python train.py
"""


def run(args) -> int:
    if args.jobs is not None and args.jobs < 1:
        print("pack: -j must be at least 1", file=sys.stderr)
        return 2
    options = build._build_options(args)
    if args.ops:
        try:
            op_dirs = list(dict.fromkeys(sources.resolve_op_dir(op).resolve() for op in args.ops))
        except OpNotFoundError as e:
            print(f"pack: {e}", file=sys.stderr)
            return 2
        results = build.build_ops(op_dirs, args)
        if any(not r["ok"] for r in results.values()):
            build.report(op_dirs, results)
            print("pack: nothing written: an op failed to build", file=sys.stderr)
            return 1
        wanted = [(d.name, results[d]["key"], d) for d in op_dirs]
        notes = []
    else:
        wanted, notes = bundle.current_builds(bundle.cached_op_names(), options)
    for note in notes:
        print(f"not packed  {note}")
    if not wanted:
        print("pack: nothing to pack: name the ops to build and pack", file=sys.stderr)
        return 1
    out = Path(args.out).expanduser().resolve()
    index = bundle.pack(out, wanted, args.name)
    size = out.stat().st_size
    for entry in index["builds"]:
        library = next(f for name, f in entry["files"].items() if name.endswith("/" + entry["library"]))
        print(f"packed      {entry['op']}  build {entry['key']} ({entry['abi']}), "
              f"{text.size(library['size'])}")
    print(f"wrote {out} ({text.size(size)}, {len(index['builds'])} build(s)), "
          f"sha256 {bundle.file_sha256(out)}")
    return 0


def add_arguments(p) -> None:
    p.add_argument("out", metavar="OUT.tar.gz", help="the bundle to write")
    p.add_argument("ops", nargs="*", metavar="OP",
                   help="an op folder name under ops/ or the path of any op folder "
                        "(default: every op the cache holds a current build of)")
    p.add_argument("--name", help="the bundle's name, as loads report it (default: OUT's name)")
    build.add_build_options(p)
