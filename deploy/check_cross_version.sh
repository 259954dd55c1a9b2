#!/usr/bin/env bash
# Built with one torch, used by another: the stable-ABI ops (sigmoid, gelu, resize,
# detection) built on one machine and run on another machine's torch, at or above the
# target version (2.11).
#
#   deploy/check_cross_version.sh make DIR    on the building machine: DIR/dist/*.whl (the
#                                             AOT wheel of the stable ops), DIR/prebuilt/
#                                             (a JIT cache layer of the same ops, what each
#                                             key names in DIR/prebuilt-keys.json) and
#                                             DIR/bundle.tar.gz (their builds as a bundle)
#   deploy/check_cross_version.sh bundle DIR  the bundle alone
#   deploy/check_cross_version.sh check DIR   on the other machine, with DIR copied there:
#     (a) the wheel, installed into a folder of its own, passes the ops' tests with
#         JIT_LOADER_PREBUILT=1 and no JIT build;
#     (b) with JIT_LOADER_CACHE=DIR/prebuilt:<empty writable>, each op loads from the
#         layer with no compiler run (op.build.compiled is False); on a miss it prints
#         which part of the key differs;
#     (c) the same ops JIT-built by this torch into a fresh cache (they compile against
#         its own stable headers);
#     (d) the bundle, unpacked, loads each op with JIT_LOADER_COMPILE=never (no compiler
#         run; a miss names what differs) and each op passes its check cases on CPU and,
#         where there is one, the GPU.
# Both steps use one CUDA arch list (JIT_LOADER_CUDA_ARCH, default 8.0;9.0+PTX): it is part
# of a stable key, and a GPU host would otherwise pick the list of its own GPUs.
# Environment: PYTHON (default python3), WITH_CUDA (make; default 1 where nvcc and a CUDA
# torch are present), MAX_JOBS, WORKERS (pytest-xdist workers for check, default 4), TESTS
# (the test files of check (a), default those of the four ops), STEPS (the steps of check,
# default "a b c d").
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
OPS_LIST="sigmoid gelu resize detection"
TESTS=${TESTS:-test_sigmoid.py test_gelu.py test_resize.py test_nms.py test_roi_align.py}
mode=${1:-}; DIR=${2:-}
[ -n "$mode" ] && [ -n "$DIR" ] || { sed -n 2,27p "$0"; exit 2; }
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
export JIT_LOADER_CUDA_ARCH=${JIT_LOADER_CUDA_ARCH:-8.0;9.0+PTX}
export TORCH_CUDA_ARCH_LIST=$JIT_LOADER_CUDA_ARCH
unset JIT_LOADER_PREBUILT
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

pack_bundle() {  # the stable ops' JIT builds as one bundle, from the cache $1
  JIT_LOADER_CACHE="$1" "$PY" -m jit_loader pack "$DIR/bundle.tar.gz" $OPS_LIST --name stable-ops
}
if [ "$mode" = bundle ]; then
  rm -rf "$DIR/.bundle-cache" "$DIR/bundle.tar.gz"
  pack_bundle "$DIR/.bundle-cache" || exit 1
  rm -rf "$DIR/.bundle-cache"
  exit 0
fi
if [ "$mode" = make ]; then
  rm -rf "$DIR/dist" "$DIR/prebuilt" "$DIR/.jit-cache"
  OPS=$OPS_LIST AOT_BUILD_DIR="$DIR/.aot-build" "$PY" -m pip wheel --no-build-isolation \
    --no-deps --no-index -q ./deploy -w "$DIR/dist" || exit 1
  JIT_LOADER_CACHE="$DIR/.jit-cache" "$PY" -m jit_loader build $OPS_LIST || exit 1
  # The layer holds the published builds only (no work folders, locks or shared pieces).
  for op in $OPS_LIST; do
    mkdir -p "$DIR/prebuilt/$op" && cp -a "$DIR/.jit-cache/$op/builds" "$DIR/prebuilt/$op/"
  done
  # What each build's key names, for check to say what differs on a miss.
  JIT_LOADER_CACHE="$DIR/.jit-cache" "$PY" - $OPS_LIST > "$DIR/prebuilt-keys.json" <<'EOF' || exit 1
import json, sys
import jit_loader
from jit_tools import key as keys
views = {}
for name in sys.argv[1:]:
    key, config = jit_loader.op_key(name)[:2]
    views[name] = {"key": key, "names": keys.key_view(config, jit_loader.REPO_ROOT / "ops" / name)}
print(json.dumps(views, indent=1, sort_keys=True))
EOF
  pack_bundle "$DIR/.jit-cache" || exit 1
  rm -rf "$DIR/.jit-cache" "$DIR/.aot-build"
  ls -l "$DIR"/dist "$DIR/bundle.tar.gz"; du -sh "$DIR/prebuilt"
  exit 0
fi
[ "$mode" = check ] || { echo "mode must be make, bundle or check, got '$mode'" >&2; exit 2; }
status=0

STEPS=${STEPS:-a b c d}
step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; echo "== ($1) skipped (STEPS=$STEPS)"; return 1; }

if step a; then
echo "== (a) the wheel passes the stable ops' tests with this torch"
site="$DIR/site"; rm -rf "$site" "$DIR/a-cache"
"$PY" -m pip install -q --no-deps --no-index --target "$site" "$DIR"/dist/*.whl || exit 1
mkdir -p "$site/tests"
for f in conftest.py op_tester.py pointwise_tester.py subproc.py $TESTS; do cp "tests/$f" "$site/tests/"; done
cp pyproject.toml "$site/"
( cd "$site" && env -u PYTHONPATH JIT_LOADER_PREBUILT=1 JIT_LOADER_CACHE="$DIR/a-cache" \
    "$PY" -m pytest -q -n "${WORKERS:-4}" -p no:cacheprovider $(printf 'tests/%s ' $TESTS) ) \
  | tail -3 || status=1
if [ -e "$DIR/a-cache" ] && [ -n "$(ls "$DIR/a-cache")" ]; then
  echo "FAIL (a): a JIT build ran: $(ls "$DIR/a-cache")"; status=1
fi
fi

if step b; then
echo "== (b) the prebuilt layer is used with no compiler run"
rm -rf "$DIR/b-writable"
JIT_LOADER_CACHE="$DIR/prebuilt:$DIR/b-writable" "$PY" - "$DIR/prebuilt" $OPS_LIST <<'EOF' || status=1
import json, sys
from pathlib import Path
import jit_loader
from jit_tools import key as keys

layer, names, failed = Path(sys.argv[1]), sys.argv[2:], 0
made = json.loads((layer.parent / "prebuilt-keys.json").read_text())
for name in names:
    op = jit_loader.load(name)
    from_layer = Path(op.library).resolve().is_relative_to(layer.resolve())
    print(f"{name}: compiled={op.build.compiled} key={op.build.key} from_layer={from_layer}")
    if op.build.compiled or not from_layer:
        failed += 1
        here = keys.key_view(jit_loader.op_key(name)[1], jit_loader.REPO_ROOT / "ops" / name)
        there = made[name]["names"]
        diff = {k: (there.get(k), here.get(k)) for k in sorted(set(here) | set(there))
                if here.get(k) != there.get(k)}
        print(f"  the key names, (in the layer, here): {diff or 'the same; a source differs'}")
sys.exit(1 if failed else 0)
EOF
fi

if step c; then
echo "== (c) the same ops JIT-built by this torch, against its own stable headers"
rm -rf "$DIR/c-cache"
JIT_LOADER_CACHE="$DIR/c-cache" "$PY" -m jit_loader build $OPS_LIST 2>&1 | tr '\r' '\n' \
  | grep -aoE '(ok|FAILED) +[a-z_]+ .*|[0-9]+ of [0-9]+ ops failed.*' || status=1
fi

if step d; then
echo "== (d) the bundle made there, unpacked here, loads with JIT_LOADER_COMPILE=never"
rm -rf "$DIR/d-layer" "$DIR/d-writable"
if [ ! -f "$DIR/bundle.tar.gz" ]; then
  echo "FAIL (d): no $DIR/bundle.tar.gz (deploy/check_cross_version.sh bundle $DIR makes it)"; status=1
else
"$PY" -m jit_loader unpack "$DIR/bundle.tar.gz" --into "$DIR/d-layer" | tail -2 || status=1
JIT_LOADER_COMPILE=never JIT_LOADER_CACHE="$DIR/d-layer:$DIR/d-writable" "$PY" - $OPS_LIST <<'EOF' || status=1
import sys
import torch
import jit_loader

failed = 0
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
for name in sys.argv[1:]:
    try:
        op = jit_loader.load(name)
    except jit_loader.JitLoaderError as e:  # one line: what differs from the bundle
        print(f"FAIL {name}: {e}")
        failed += 1
        continue
    bad = [r.summary() for d in devices for r in jit_loader.check_op(op, d, verbose=False) if not r]
    ok = not bad and not op.build.compiled and op.build.origin.startswith("bundle ")
    print(f"{name}: compiled={op.build.compiled} origin={op.build.origin} "
          f"checks on {'+'.join(devices)}: {'ok' if not bad else bad}")
    failed += not ok
sys.exit(1 if failed else 0)
EOF
fi
fi

[ $status = 0 ] && echo "cross-version check: PASS" || echo "cross-version check: FAIL"
exit $status
