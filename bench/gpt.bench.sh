#!/usr/bin/env bash
# GPT training throughput, side by side: `lockstep train examples/configs/gpt_fortunes.yaml` (gpt-mini,
# block 256, micro-batch 8 per rank, fortunes bytes) against the same model, data, batch and optimizer in
# PyTorch (bench/scripts/torch_gpt.py), written the minGPT way and with F.scaled_dot_product_attention,
# and with torch.compile where it works here; 1 and 2 ranks, one thread and one core per rank.
#   bench/gpt.bench.sh [BUILD_DIR] [STEPS] [REPS]
# PRECISION=bf16 runs both sides in bf16 mixed precision (lockstep's bf16.enabled, torch.autocast
# with bf16 on the CPU); the default is fp32. The f32 ceiling below is printed for fp32 only.
# Reports tokens/s (all ranks) per configuration, median over REPS, and lockstep / torch ratios.
# lockstep's figure is summary.json's tokens_per_second over the whole run (its first steps included);
# torch's leaves out its first WARMUP steps: the peer gets the better deal.
# The peer: current PyTorch from PyPI in a virtual environment (BUILD_DIR/bench-venv, created on first use;
# PYTHON=/usr/bin/python3 runs Debian's 1.13 instead). Each torch configuration runs with and without the
# glibc malloc tunables; the faster counts.
set -euo pipefail
build=${1:-build}
steps=${2:-60}
reps=${3:-3}
warmup=${WARMUP:-10}
precision=${PRECISION:-fp32}
case $precision in fp32 | bf16) ;; *) echo "PRECISION=$precision: fp32 or bf16" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
port=$((29700 + RANDOM % 90))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source "$here/scripts/peer.sh"
peer_python "$build" gpt.bench
ours() {  # ours WORLD: tokens/s from summary.json
  local out=$work/o$1-$RANDOM
  run_ranks "$1" "$build/lockstep" train "$root/examples/configs/gpt_fortunes.yaml" --output-dir "$out" \
    --set max_steps="$steps" --set checkpoint.every_steps=0 --set tensorboard.enabled=false \
    --set sample.max_new_tokens=0 --set bf16.enabled="$([ "$precision" = bf16 ] && echo true || echo false)" \
    >/dev/null 2>&1 || true
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens_per_second'])" "$out/summary.json" 2>/dev/null || echo 0
}
theirs() {  # theirs WORLD ATTENTION [--compile] [--precision bf16]: the faster of without and with the tunables
  local world=$1
  shift
  peer_best tokens_per_second "$world" "$python" "$here/scripts/torch_gpt.py" --max-steps "$steps" \
    --warmup-steps "$warmup" --precision "$precision" --attention "$@" | cut -d' ' -f1
}
median() { python3 -c "import statistics,sys; print(statistics.median(float(v) for v in sys.argv[1:]))" "$@"; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc --all) cores; torch: $("$python" -c 'import torch; print(torch.__version__)'); precision: $precision"
declare -A results
configs=("lockstep 1" "torch-mingpt 1" "torch-sdpa 1" "torch-compile 1" "lockstep 2" "torch-mingpt 2" "torch-sdpa 2")
for ((i = 1; i <= reps; i++)); do
  for cfg in "${configs[@]}"; do
    set -- $cfg
    case $1 in
      lockstep) v=$(ours "$2") ;;
      torch-mingpt) v=$(theirs "$2" mingpt) ;;
      torch-sdpa) v=$(theirs "$2" sdpa) ;;
      torch-compile) v=$(theirs "$2" sdpa --compile 2>/dev/null || echo 0) ;;
    esac
    results["$cfg"]="${results["$cfg"]:-} $v"
    echo "rep $i: $cfg ranks: $v tokens/s" >&2
  done
done
printf "%-16s %6s %14s\n" config ranks "tokens/s"
for cfg in "${configs[@]}"; do
  set -- $cfg
  m=$(median ${results["$cfg"]})
  results["$cfg"]=$m
  printf "%-16s %6s %14.0f\n" "$1" "$2" "$m"
done
for w in 1 2; do
  for peer in torch-mingpt torch-sdpa torch-compile; do
    [ -n "${results["$peer $w"]:-}" ] || continue
    python3 -c "import sys; o,t=float(sys.argv[1]),float(sys.argv[2]); print(f'{sys.argv[4]} rank(s): lockstep / {sys.argv[3]} = ' + (f'{o/t:.2f}x' if t>0 else 'n/a (peer did not run)'))" \
      "${results["lockstep $w"]}" "${results["$peer $w"]}" "$peer" "$w"
  done
done

# The arithmetic ceiling of one core, so the ratios can be read against the hardware: the model's
# training FLOPs per token (6 per parameter in a matrix product: 12 L d^2 in the blocks, d V in the tied
# output layer; plus causal attention's 6 L T d for QK^T and PV, forward and backward) into oneDNN's best
# f32 sgemm rate on the model's own shapes (bench_gemm_peak). Nothing that does all this arithmetic in
# f32 on this core runs faster, whatever else it saves.
gemm_peak=$build/bench/bench_gemm_peak
if [ "$precision" != fp32 ]; then
  echo "ceiling: printed for fp32 only"
elif [ -x "$gemm_peak" ]; then
  L=6 d=192 T=256 V=256 M=$((8 * 256))  # gpt-mini, block 256, byte vocabulary, micro-batch 8
  shapes="${M}x$((3 * d))x$d,${M}x${d}x$d,${M}x$((4 * d))x$d,${M}x${d}x$((4 * d)),${d}x$((3 * d))x$M,$((4 * d))x${d}x$M"
  peak=$(taskset -c 0 "$gemm_peak" --shapes "$shapes" | sed -n 's/^best_gflops=\([0-9.]*\).*/\1/p')
  python3 - "$peak" "$L" "$d" "$T" "$V" "${results["lockstep 1"]}" "${results["torch-sdpa 1"]:-0}" <<'PY'
import sys
peak, L, d, T, V, ours, sdpa = float(sys.argv[1]), *map(int, sys.argv[2:6]), float(sys.argv[6]), float(sys.argv[7])
flops = 6 * (12 * L * d * d + d * V) + 6 * L * T * d
ceiling = peak * 1e9 / flops
print(f"ceiling, 1 rank: {peak:.1f} GFLOP/s (best oneDNN sgemm on the model's shapes) / {flops / 1e6:.2f} MFLOP "
      f"per token = {ceiling:.0f} tokens/s; lockstep at {ours / ceiling:.0%} of it" +
      (f", torch-sdpa at {sdpa / ceiling:.0%}; the ceiling is {ceiling / sdpa:.2f}x torch-sdpa" if sdpa > 0 else ""))
PY
else
  echo "ceiling: $gemm_peak not built (cmake --build $build --target bench_gemm_peak)"
fi
