#!/usr/bin/env bash
# DDP throughput of experiments/train_lltm.py: samples/s on one GPU and on two (NCCL) for
# the reference and CUDA backends, and on CPU (gloo, one and two ranks) for the reference
# and C++ backends; then one table with the scaling (vs one rank) and the speedup (vs the
# reference backend at the same rank count).
#
# Sizes (per rank, weak scaling: every rank keeps its batch):
#   compute  batch 256, 32 steps of time, embed 256, state 1024: GEMM-heavy; the gradient
#            all-reduce (about 16 MB) is small next to a step's compute
#   launch   batch 32, 32 steps of time, embed 32, state 128: the tutorial's cell size,
#            bound by kernel launches
#   large    batch 512, 32 steps of time, embed 512, state 2048: GEMMs of about 8 GFLOP a
#            time step; the all-reduce (about 63 MB) is small next to the step (not run
#            unless SIZES names it)
#
#   bash experiments/ddp_run.sh            # results and logs under $OUT (default /tmp/ddp_out)
#   STEPS=60 TIMEOUT=240 CPU_RUNS=0 bash experiments/ddp_run.sh   # steps, seconds per run, no CPU runs
#   SIZES="large compute" bash experiments/ddp_run.sh              # which GPU sizes (default: compute launch)
#
# With one GPU visible only the one-GPU runs happen. The environment passes unchanged to
# every rank (torchrun forwards it); NCCL settings are whatever the machine sets.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-${OUT_H:-/tmp/ddp_out}}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export JIT_LOADER_CACHE=${JIT_LOADER_CACHE:-/tmp/jit_loader_cache}
STEPS=${STEPS:-60}      # per run; the first 10 are left out of samples/s
TIMEOUT=${TIMEOUT:-240} # seconds per run

COMPUTE="--batch-size 256 --seq-len 32 --embed 256 --state 1024"
LAUNCH="--batch-size 32 --seq-len 32 --embed 32 --state 128"
LARGE="--batch-size 512 --seq-len 32 --embed 512 --state 2048"
SIZES=${SIZES:-compute launch}
COMMON="--steps $STEPS --timing-warmup 10 --log-every 20 --no-progress"

NGPU=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
{ echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')"
  echo "GPUs visible: $NGPU; CPU cores: $(nproc)"
  env | grep -E '^(NCCL_|TORCH_SYMM_MEM_|NVSHMEM_)' | sort; } 2>&1 | tee "$OUT/ddp_env.txt"

status=0
train() {  # train TAG NPROC ARGS...: one torchrun launch, its summary in $OUT/ddp_TAG.json
  local tag=$1 nproc=$2; shift 2
  echo "=== $tag: $nproc rank(s) ($(date +%T))"
  timeout "$TIMEOUT" $PY -m torch.distributed.run --standalone --nproc-per-node "$nproc" \
      -m experiments.train_lltm $COMMON "$@" --json "$OUT/ddp_$tag.json" \
      >"$OUT/ddp_$tag.txt" 2>&1
  local rc=$?
  grep "^train_lltm" "$OUT/ddp_$tag.txt"
  if [ $rc -ne 0 ]; then
    echo "FAILED (exit $rc), last lines of $OUT/ddp_$tag.txt:"; tail -15 "$OUT/ddp_$tag.txt"; status=1
  fi
}

echo "=== build the op ($(date +%T))"
timeout "$TIMEOUT" $PY -m jit_loader build lltm 2>&1 | tr '\r' '\n' | grep -v "^ *$" | tail -3
if [ "$NGPU" -ge 1 ]; then
  gpus=(1); [ "$NGPU" -ge 2 ] && gpus=(2 1)
  for n in "${gpus[@]}"; do
    for backend in cuda reference; do
      for size in $SIZES; do
        case $size in
          compute) args=$COMPUTE ;; launch) args=$LAUNCH ;; large) args=$LARGE ;;
          *) echo "unknown size $size (compute, launch, large)"; status=1; continue ;;
        esac
        train "${size}_${backend}_gpu$n" "$n" --backend "$backend" --device cuda $args
      done
    done
  done
  [ "$NGPU" -lt 2 ] && echo "only $NGPU GPU visible: no two-GPU runs"
else
  echo "no GPU visible: CPU runs only"
fi
for n in $([ "${CPU_RUNS:-1}" = 1 ] && echo 1 2); do
  for backend in cpp reference; do
    train "launch_${backend}_cpu$n" "$n" --backend "$backend" --device cpu --threads 4 \
      $LAUNCH --steps 30
  done
done

echo "=== samples/s (global, all ranks); scaling_vs_1: / the same run on one rank;" \
     "speedup_vs_reference: / the reference backend on the same device and ranks"
$PY -m experiments.train_lltm --table "$OUT"/ddp_*.json 2>&1 | tee "$OUT/ddp_table.md"
exit $status
