#!/usr/bin/env bash
# The deployment paths on a GPU machine whose python has torch, ninja, pytest, pytest-xdist
# and which has CMake: every op built ahead of time with CUDA (in place), the op tests
# against those builds, the model exported for CUDA, and the C++ runner on CUDA inputs
# (AOTInductor package and TorchScript) compared with Python. Logs under $OUT_H.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT_H:-deploy/out/gpu}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-6}
export JIT_LOADER_CACHE="$PWD/.build-cache"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
date -u

# The runner does not depend on the op libraries: build it meanwhile.
prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cuda_root=()
[ -d /usr/local/cuda ] && cuda_root=(-DCUDA_TOOLKIT_ROOT_DIR=/usr/local/cuda)
( cmake -S deploy/runner -B deploy/runner/build -DCMAKE_PREFIX_PATH="$prefix" "${cuda_root[@]}" \
    -DCMAKE_BUILD_TYPE=Release > "$OUT/runner_build.log" 2>&1 \
  && cmake --build deploy/runner/build -j 4 >> "$OUT/runner_build.log" 2>&1 ) &
runner_pid=$!

# One process per op so the three CUDA builds overlap.
start=$(date +%s)
build_pids=()
for op in sigmoid gelu lltm; do
  OPS=$op WITH_CUDA=1 AOT_BUILD_DIR="build/$op" timeout 120 \
    python3 deploy/setup.py build_ext --inplace > "$OUT/aot_$op.log" 2>&1 &
  build_pids+=($!)
done
wait "${build_pids[@]}"
for op in sigmoid gelu lltm; do
  echo "$op: $(ls ops/$op/_C*.so 2>/dev/null || echo 'NO LIBRARY'; tail -1 "$OUT/aot_$op.log")"
done
echo "AOT build of the three ops with CUDA: $(( $(date +%s) - start )) s"
cat ops/*/_C.json

# Op tests against the prebuilt libraries, while the model is exported.
JIT_LOADER_PREBUILT=1 timeout 170 python3 -m pytest -q -n 6 -p no:cacheprovider \
  tests/test_sigmoid.py tests/test_gelu.py tests/test_lltm.py > "$OUT/op_tests_prebuilt.log" 2>&1 &
tests_pid=$!
start=$(date +%s)
JIT_LOADER_PREBUILT=1 timeout 170 python3 -W ignore -m deploy.export_model --out "$OUT/model" \
  --device cuda > "$OUT/export.log" 2>&1
echo "export rc=$? in $(( $(date +%s) - start )) s"; tail -6 "$OUT/export.log"
wait $runner_pid; echo "runner build rc=$?"; tail -2 "$OUT/runner_build.log"
libs=()
for op in gelu lltm sigmoid; do libs+=(--ops "$(ls ops/$op/_C*.so)"); done
for model in model.pt2 model.ts; do
  echo "== ops_runner --device cuda $model"
  timeout 60 deploy/runner/build/ops_runner "${libs[@]}" --device cuda "$OUT/model/$model" \
    "$OUT/model/inputs.pt" "$OUT/model/out_$model.pt"
  echo "runner rc=$?"
  python3 -m deploy.compare "$OUT/model/expected.pt" "$OUT/model/out_$model.pt" && echo "matches Python"
done
wait $tests_pid; echo "op tests (JIT_LOADER_PREBUILT=1) rc=$?"
tail -6 "$OUT/op_tests_prebuilt.log"
ls -la "$OUT/model"; rm -f "$OUT"/model/*.pt2 "$OUT"/model/*.ts
date -u
