#!/usr/bin/env bash
# Attention, one head of 64, batch 1, one thread: the fused op's peak memory of forward + backward
# at T = 512, 1024, 2048 (target: linear in T) and its time against a plain matmul-softmax-matmul
# at T = 512 (target: within 1.5x). Each line is one process (a fresh allocator peak).
#   bash bench/attention.bench.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bin=$build/bench/bench_attention
[ -x "$bin" ] || { echo "attention.bench.sh: $bin not built (cmake --build $build --target bench_attention)" >&2; exit 1; }
lscpu | grep -m1 'Model name' || true
for impl in fused naive; do
  for t in 512 1024 2048; do
    "$bin" --impl "$impl" --seq "$t" --steps 5
  done
done
for impl in fused naive; do
  "$bin" --impl "$impl" --seq 512 --steps 50
  "$bin" --impl "$impl" --seq 512 --steps 50 --causal
done
