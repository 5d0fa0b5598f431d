#!/usr/bin/env bash
# DDP throughput, side by side: lockstep's train_fashion_mnist vs PyTorch DDP (gloo), seed 001's CNN,
# Fashion-MNIST, per-rank batch 32, one thread per rank, 1 and 2 ranks on this machine.
#   bench/ddp.bench.sh [BUILD_DIR] [STEPS]
# Targets: lockstep at 2 ranks >= 3x PyTorch's samples/s at 2 ranks; 1 -> 2 rank scaling >= 95%.
set -euo pipefail
build=${1:-build}
steps=${2:-600}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
port=$((29700 + RANDOM % 200))

run_ranks() {  # run_ranks WORLD CMD...: starts WORLD ranks with torchrun's variables, prints rank 0's output
  local world=$1
  shift
  local pids=() r
  for ((r = world - 1; r >= 0; r--)); do
    if [ "$r" -eq 0 ]; then
      RANK=0 LOCAL_RANK=0 WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@"
    else
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$@" >/dev/null 2>&1 &
      pids+=($!)
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  port=$((port + 1))
}

rate() { sed -n 's/.*samples_per_second=\([0-9.]*\).*/\1/p' | tail -n 1; }

ours1=$(run_ranks 1 "$build/examples/train_fashion_mnist" --epochs 1 --max-steps "$steps" --batch-size 32 2>/dev/null | rate)
ours2=$(run_ranks 2 "$build/examples/train_fashion_mnist" --epochs 1 --max-steps "$steps" --batch-size 32 2>/dev/null | rate)
torch1=$(run_ranks 1 /usr/bin/python3 "$here/scripts/torch_ddp_fashion_mnist.py" --max-steps "$steps" --batch-size 32 | rate)
torch2=$(run_ranks 2 /usr/bin/python3 "$here/scripts/torch_ddp_fashion_mnist.py" --max-steps "$steps" --batch-size 32 | rate)
python3 - "$ours1" "$ours2" "$torch1" "$torch2" <<'PY'
import sys
o1, o2, t1, t2 = map(float, sys.argv[1:])
print(f"lockstep: 1 rank {o1:.0f} samples/s, 2 ranks {o2:.0f} samples/s, scaling {o2 / (2 * o1):.1%}")
print(f"torch:    1 rank {t1:.0f} samples/s, 2 ranks {t2:.0f} samples/s, scaling {t2 / (2 * t1):.1%}")
print(f"2 ranks: lockstep / torch = {o2 / t2:.2f}x (target >= 3x); lockstep scaling target >= 95%")
PY
