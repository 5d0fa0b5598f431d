#!/usr/bin/env bash
# Mixed precision, side by side: lockstep's train_fashion_mnist in fp32 and bf16 vs PyTorch with
# torch.autocast("cpu", torch.bfloat16), seed 001's CNN, Fashion-MNIST, one thread per rank.
#   bench/precision.bench.sh [BUILD_DIR] [STEPS] [REPS]
# Runs, per repetition: 1 rank at batch 32 and at batch 128 (lockstep fp32, lockstep bf16, torch
# bf16), and 2 ranks at batch 32 per rank (lockstep bf16, torch bf16 DDP over gloo); reports the
# medians and the ratios the targets are stated in:
#   1 rank, batch 32 and 128: lockstep bf16 >= 1.6x lockstep fp32 and >= 4x torch bf16
#   2 ranks: lockstep bf16 >= 4x torch bf16 DDP
# Every lockstep line names the kernel path (kernels::precisionPath: native oneDNN bf16 on which
# ISA, or emulated in f32 where the CPU has no bf16 kernels) and torch prints its CPU capability:
# a figure is never read without the hardware. On a CPU without AVX-512 lockstep's bf16 is
# emulated and the targets do not apply.
# The peer: current PyTorch from PyPI in a virtual environment (created at $VENV, default
# BUILD_DIR/bench-venv, on first use; PYTHON=/usr/bin/python3 runs Debian's 1.13 instead). Each
# torch configuration runs with and without the glibc malloc tunables that keep its buffers mapped
# (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=...); the faster of the two counts, as the developers'
# guide asks.
set -euo pipefail
build=${1:-build}
steps=${2:-400}
reps=${3:-3}
warmup=${WARMUP:-20}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
port=$((29900 + RANDOM % 90))

source "$here/scripts/peer.sh"
peer_python "$build" precision.bench
rate() { sed -n 's/.*samples_per_second=\([0-9.]*\).*/\1/p' | tail -n 1; }
ours() {  # ours WORLD BATCH PRECISION
  run_ranks "$1" "$build/examples/train_fashion_mnist" --epochs 1 --max-steps "$steps" --warmup-steps "$warmup" \
    --batch-size "$2" --num-workers 0 --gradient-as-bucket-view --precision "$3"
}
theirs() {  # theirs WORLD BATCH PRECISION: the faster of without and with the malloc tunables
  peer_best samples_per_second "$1" "$python" "$here/scripts/torch_ddp_fashion_mnist.py" --max-steps "$steps" \
    --warmup-steps "$warmup" --batch-size "$2" --gradient-as-bucket-view --precision "$3" | cut -d' ' -f1
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); AVX-512 bf16: $(grep -qw avx512_bf16 /proc/cpuinfo && echo yes || echo no); AMX: $(grep -qw amx_bf16 /proc/cpuinfo && echo yes || echo no)"
run_ranks 1 "$build/examples/train_fashion_mnist" --epochs 1 --max-steps 2 --batch-size 32 --num-workers 0 \
  --precision bf16 | sed -n 's/.*\(kernels=.*\)/lockstep bf16 &/p' | sed 's/.*kernels=/lockstep bf16 kernels: /'
run_ranks 1 "$python" "$here/scripts/torch_ddp_fashion_mnist.py" --max-steps 2 --precision bf16 |
  sed -n 's/.*\(version=[^ ]*\) \(cpu_capability=[^ ]*\).*/torch \1 \2/p'

rows=()
for ((i = 1; i <= reps; i++)); do
  row=()
  for b in 32 128; do
    row+=("$(ours 1 $b fp32 | rate)" "$(ours 1 $b bf16 | rate)" "$(theirs 1 $b bf16)")
  done
  row+=("$(ours 2 32 bf16 | rate)" "$(theirs 2 32 bf16)")
  echo "rep $i (samples/s): b32 lockstep fp32 ${row[0]} bf16 ${row[1]} torch bf16 ${row[2]};" \
    "b128 lockstep fp32 ${row[3]} bf16 ${row[4]} torch bf16 ${row[5]}; 2 ranks b32 lockstep bf16 ${row[6]} torch bf16 ${row[7]}"
  rows+=("${row[*]}")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
m = [statistics.median(c) for c in zip(*rows)]
for b, (f, o, t) in ((32, m[0:3]), (128, m[3:6])):
    print(f"1 rank, batch {b}: lockstep fp32 {f:.0f}, bf16 {o:.0f} ({o / f:.2f}x its fp32; target >= 1.6x), "
          f"torch bf16 {t:.0f} (lockstep/torch {o / t:.2f}x; target >= 4x)")
print(f"2 ranks, batch 32/rank: lockstep bf16 {m[6]:.0f}, torch bf16 DDP {m[7]:.0f} (lockstep/torch {m[6] / m[7]:.2f}x; target >= 4x)")
print(f"medians of {len(rows)} repetitions, {sys.argv[1]} steps each (first {sys.argv[2]} left out)")
' "$steps" "$warmup"
