#!/usr/bin/env bash
# Training with the LLTM op on every visible GPU: where a rank's step time goes (1 rank
# against N), the weak-scaling efficiency of DDP per size, backend and configuration, and
# the op's own benchmark. Details under $OUT; a short summary printed last.
#
#   bash experiments/ddp_run.sh                      # stages: env build tests bench profile scaling pinned graph
#   bash experiments/ddp_run.sh env build scaling    # some stages
#   STEPS=300 SIZES="compute launch" CONFIGS="baseline fixed tuned" bash experiments/ddp_run.sh scaling
#
# Stages:
#   env       device, torch, NCCL and the NCCL_/TORCH_SYMM_MEM_/NVSHMEM_ environment
#   build     the lltm op (one compile; every later rank loads it from the cache)
#   tests     the op's tests (tests/test_lltm.py, CPU and CUDA cases)
#   bench     experiments/bench_lltm.py at 16x32x128, 64x128x256, 256x256x1024 against
#             eager (no torch.compile), with the op's default crossover between its
#             one-launch kernels and cuBLAS and with LLTM_SMALL_MACS=$OLD_SMALL_MACS; then
#             the GPU time of each of its kernels
#   profile   torch.profiler on every rank for PROFILE_STEPS steps, CUDA backend, PROFILE_SIZES x
#             PROFILE_CONFIGS, on 1 rank and on N: experiments/step_profile.py's table (GPU
#             busy/idle, forward/backward/optimizer, NCCL overlap, host waits)
#   scaling   experiments/ddp_scaling.py sweep on 1 rank, then on 2, 4, ... up to the GPUs
#             visible: SIZES x BACKENDS x CONFIGS, STEPS steps each (the first 20 untimed)
#   pinned    the N-rank sweep of PINNED_CONFIGS again, each rank on its own share of the
#             cores (--pin-cpus; configuration names get "+pin")
#   graph     the same for the CUDA-graph configuration, in launches of its own
#   cpu       gloo on the CPU, 1 and 2 ranks (the C++ and reference backends)
# Sizes (per rank; weak scaling keeps them): compute = batch 256, 32 steps of time, embed
# 256, state 1024; launch = batch 32, embed 32, state 128; large = batch 512, embed 512,
# state 2048 (experiments/ddp_scaling.py).
#
# Files under $OUT: summary.txt (what is printed last), ddp_details.tar.gz (every log,
# summary JSON, profile summary and trace), bench_lltm.txt, pytest_lltm.txt, and
# results/ddp_scaling.json (the efficiency table for experiments/results.py). The
# environment passes unchanged to every rank; NCCL settings are the machine's (NVLink
# multicast stays as it sets it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ddp_out}
WORK=${WORK:-/tmp/ddp_work}  # logs and JSON; $OUT gets them as one tar.gz
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
export JIT_LOADER_CACHE=${JIT_LOADER_CACHE:-/tmp/jit_loader_cache}
export JIT_LOADER_CUDA_ARCH=${JIT_LOADER_CUDA_ARCH:-9.0}
# The loader's shared pieces (the fast call entry among them) are built with the op, in the
# build stage, not by a background process during the first timed runs.
export JIT_LOADER_SHARED_NOW=${JIT_LOADER_SHARED_NOW:-1}
# One CPU thread per rank for every launch: torchrun sets 1 for several ranks and leaves one
# rank with all cores, which would make the 1-rank baseline run differently; a step does no
# CPU math that threads would help.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
STEPS=${STEPS:-300}
TIMEOUT=${TIMEOUT:-300}
SIZES=${SIZES:-compute launch}
BACKENDS=${BACKENDS:-cuda reference}
CONFIGS=${CONFIGS:-baseline fixed tuned}
PINNED_CONFIGS=${PINNED_CONFIGS:-tuned}
PROFILE_SIZES=${PROFILE_SIZES:-compute launch}
PROFILE_CONFIGS=${PROFILE_CONFIGS:-baseline tuned graph}
PROFILE_STEPS=${PROFILE_STEPS:-4}
OLD_SMALL_MACS=${OLD_SMALL_MACS:-4194304}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env build tests bench profile scaling pinned graph)

NGPU=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
RANKS="1"
for n in 2 4 8; do [ "$NGPU" -ge $n ] && RANKS="$RANKS $n"; done
case " $RANKS " in *" $NGPU "*) ;; *) [ "$NGPU" -gt 1 ] && RANKS="$RANKS $NGPU" ;; esac

status=0
pack() { tar czf "$OUT/ddp_details.tar.gz" -C "$WORK" . 2>/dev/null; }
torchrun() {  # torchrun TAG NPROC ARGS...: one launch, its output in $WORK/TAG.txt
  local tag=$1 nproc=$2; shift 2
  echo "--- $tag: $nproc rank(s) ($(date +%T))"
  # Which processes hold a context on which GPU, once the ranks are running: one each.
  ( sleep 15; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv \
      >"$WORK/$tag.gpu_apps.txt" 2>&1 ) &
  local apps=$!
  timeout "$TIMEOUT" $PY -m torch.distributed.run --standalone --nproc-per-node "$nproc" "$@" \
    >"$WORK/$tag.txt" 2>&1
  local rc=$?
  kill $apps 2>/dev/null; wait $apps 2>/dev/null
  grep -E "^(=== |train_lltm: [0-9]+ samples|ddp_scaling: )" "$WORK/$tag.txt"
  if [ $rc -ne 0 ]; then
    echo "FAILED (exit $rc), last lines of $tag.txt:"; tail -12 "$WORK/$tag.txt"; status=1
  fi
}
sweep() {  # sweep TAG NPROC ARGS...: experiments/ddp_scaling.py sweep into $WORK/runs
  local tag=$1 nproc=$2; shift 2
  torchrun "$tag" "$nproc" -m experiments.ddp_scaling sweep --out "$WORK/runs" --steps "$STEPS" "$@"
}

for stage in "${stages[@]}"; do
  echo "=== $stage ($(date +%T))"
  case $stage in
    env) { echo "date: $(date -u +%FT%TZ)"
           nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
           nvidia-smi topo -m
           $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')"
           echo "GPUs visible: $NGPU; rank counts: $RANKS; CPU cores: $(nproc --all); OMP_NUM_THREADS $OMP_NUM_THREADS"
           env | grep -E '^(NCCL_|TORCH_SYMM_MEM_|NVSHMEM_|TORCH_NCCL_)' | sort; } 2>&1 | tee "$WORK/env.txt" ;;
    build) timeout "$TIMEOUT" $PY -m jit_loader build lltm 2>&1 | tr '\r' '\n' | grep -v "^ *$" \
             | tail -3 | tee "$WORK/build.txt" ;;
    tests) timeout "$TIMEOUT" $PY -m pytest -q -rs -p no:cacheprovider -n "${PYTEST_WORKERS:-4}" \
             tests/test_lltm.py > "$WORK/pytest_lltm.txt" 2>&1 || status=1
           grep -E "^(FAILED|ERROR)" "$WORK/pytest_lltm.txt" | head -20; tail -1 "$WORK/pytest_lltm.txt"
           cp "$WORK/pytest_lltm.txt" "$OUT/" ;;
    bench) : > "$OUT/bench_lltm.txt"
           for macs in default "$OLD_SMALL_MACS"; do
             echo "# LLTM_SMALL_MACS=$macs (the op's crossover to cuBLAS, in multiply-adds)" \
               | tee -a "$OUT/bench_lltm.txt"
             ( [ "$macs" != default ] && export LLTM_SMALL_MACS=$macs
               timeout "$TIMEOUT" $PY -m experiments.bench_lltm --device cuda --quick --no-compile \
                 --no-progress --json "$WORK/bench_lltm_macs_$macs.json" ) 2>&1 | grep -v "^W1" \
               | tee -a "$OUT/bench_lltm.txt" | grep -E "^# bench|^\| (pass|forward|size) |ERROR|Error" \
               || status=1
             ( [ "$macs" != default ] && export LLTM_SMALL_MACS=$macs
               timeout "$TIMEOUT" $PY -m experiments.bench_lltm --kernel-times ) 2>&1 \
               | tee "$WORK/lltm_kernel_times_macs_$macs.txt" | grep -E "\(all\)" || status=1
           done ;;
    profile) [ "$NGPU" -ge 1 ] || { echo "no GPU: no profile"; continue; }
             rm -rf "$WORK/profile" "$WORK/profile_table.md"
             for n in 1 ${RANKS##* }; do
               [ "$n" -gt "$NGPU" ] && continue
               torchrun "profile_gpu$n" "$n" -m experiments.ddp_scaling sweep --out "$WORK/profile" \
                 --sizes $PROFILE_SIZES --backends cuda --configs $PROFILE_CONFIGS --steps 40 --warmup 15 \
                 --profile-steps "$PROFILE_STEPS"
               [ "$n" = 1 ] && [ "$NGPU" -lt 2 ] && break
             done
             $PY -m experiments.step_profile "$WORK"/profile/profiles/summary_*.json 2>&1 \
               | tee "$WORK/profile_table.md" ;;
    scaling) [ "$NGPU" -ge 1 ] || { echo "no GPU: no scaling runs"; continue; }
             rm -f "$WORK"/runs/*.json
             for n in $RANKS; do
               sweep "scaling_gpu$n" "$n" --sizes $SIZES --backends $BACKENDS --configs $CONFIGS
             done ;;
    pinned) [ "$NGPU" -ge 2 ] || { echo "fewer than 2 GPUs: no pinned runs"; continue; }
            rm -f "$WORK"/runs/*+pin_gpu*.json
            for n in $RANKS; do
              [ "$n" = 1 ] && continue
              sweep "pinned_gpu$n" "$n" --sizes $SIZES --backends $BACKENDS --configs $PINNED_CONFIGS \
                --pin-cpus --suffix +pin
            done ;;
    graph) [ "$NGPU" -ge 1 ] || { echo "no GPU: no graph runs"; continue; }
           rm -f "$WORK"/runs/*_graph_gpu*.json
           for n in $RANKS; do
             sweep "graph_gpu$n" "$n" --sizes $SIZES --backends $BACKENDS --configs graph
           done ;;
    cpu) for n in 1 2; do
           sweep "cpu$n" "$n" --sizes launch --backends cpp reference --configs fixed \
             --device cpu --steps 40
         done ;;
    *) echo "unknown stage $stage"; status=1 ;;
  esac
  pack
done

{ echo "=== summary ($(date -u +%FT%TZ))"
  grep -E "^(date|torch|GPUs visible)|, [0-9]+ MiB" "$WORK/env.txt" 2>/dev/null
  [ -s "$WORK/pytest_lltm.txt" ] && echo "tests/test_lltm.py: $(tail -1 "$WORK/pytest_lltm.txt")"
  if ls "$WORK"/runs/*.json >/dev/null 2>&1; then
    echo "--- weak scaling: efficiency = samples/s on N GPUs / (N x the same size, backend and config on 1 GPU)"
    mkdir -p "$OUT/results"
    $PY -m experiments.ddp_scaling table "$WORK"/runs/*.json --results "$OUT/results/ddp_scaling.json"
  fi
  if [ -s "$WORK/profile_table.md" ]; then
    echo "--- per-step profile, ms per step (rank, config, size in the run name)"
    cat "$WORK/profile_table.md"
    for f in "$WORK"/*.gpu_apps.txt; do
      [ -s "$f" ] && echo "$(basename "$f" .gpu_apps.txt): $(tail -n +2 "$f" | awk -F, '{print $2}' | sort | uniq -c | tr -s ' ' | tr '\n' ';') (processes per GPU bus id)"
    done
  fi
  if [ -s "$OUT/bench_lltm.txt" ]; then
    echo "--- LLTM op against eager (forward+backward target at 64x128x256: 2.5x)"
    grep -E "^# (bench|LLTM)|^\| pass |^\| forward.*reference eager" "$OUT/bench_lltm.txt" | head -30
  fi
} 2>&1 | tee "$OUT/summary.txt"
pack
exit $status
