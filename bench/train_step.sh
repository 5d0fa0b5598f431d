#!/usr/bin/env bash
# Side by side, one thread each: lockstep's and PyTorch's training step of the seed MNIST CNN.
#   bench/train_step.sh [BUILD_DIR] [BATCHES] [STEPS]
# Prints both results and, per batch size, ratio = torch_step_ms / lockstep_step_ms (target >= 2).
set -euo pipefail
build=${1:-build}
batches=${2:-32,128}
steps=${3:-200}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
ours=$("$build/bench/bench_train_step" --batch "$batches" --steps "$steps")
theirs=$(/usr/bin/python3 "$here/scripts/torch_train_step.py" --batch "$batches" --steps "$steps")
echo "$ours"
echo "$theirs"
for b in ${batches//,/ }; do
  o=$(echo "$ours" | sed -n "s/.*batch=$b .*step_ms=\([0-9.]*\).*/\1/p")
  t=$(echo "$theirs" | sed -n "s/.*batch=$b .*step_ms=\([0-9.]*\).*/\1/p")
  python3 -c "print(f'batch=$b lockstep_ms=$o torch_ms=$t ratio={$t/$o:.2f}x (torch time / lockstep time; target >= 2.00x)')"
done
