#!/usr/bin/env bash
# Mixed precision, what it does to the result: the seed CNN trained on Fashion-MNIST by
# `lockstep train examples/configs/fashion_mnist_cnn.yaml` (the `make run` job: 2 ranks of 32, Adam,
# EPOCHS epochs) in fp32, bf16 (bf16.enabled) and fp16 (fp16.enabled, DeepSpeed's dynamic loss
# scaler), the same seed, data order and steps for all three. Prints each run's test accuracy and
# the difference from fp32 in points (the target: within 0.5 points), and for fp16 the final loss
# scale and the skipped steps.
#   bench/precision_accuracy.bench.sh [BUILD_DIR] [EPOCHS]      SEEDS="1 2 3" repeats with other seeds
# One seed's difference includes the run-to-run spread of training itself (the three runs round
# differently from the first step on, so they take different paths); SEEDS averages it out.
set -euo pipefail
build=${1:-build}
epochs=${2:-5}
seeds=${SEEDS:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one() {  # one PRECISION SEED: prints "test_accuracy samples_per_second loss_scale skipped_steps precision_path"
  local out=$work/$1-$2 extra=()
  [ "$1" != fp32 ] && extra=(--set "$1.enabled=true")
  "$build/lockstep" train "$root/examples/configs/fashion_mnist_cnn.yaml" --nproc-per-node 2 --output-dir "$out" \
    --set epochs="$epochs" --set seed="$2" --set checkpoint.every_steps=0 --set tensorboard.enabled=false \
    "${extra[@]}" >"$out.log" 2>&1 || { echo "precision_accuracy: the $1 run failed; its log:" >&2; cat "$out.log" >&2; exit 1; }
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["test_accuracy"], round(s["samples_per_second"]), s.get("loss_scale", "-"), s.get("skipped_steps", "-"),
      s.get("precision_path", "-").replace(" ", "_"))' "$out/summary.json"
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); AVX-512 bf16: $(grep -qw avx512_bf16 /proc/cpuinfo && echo yes || echo no);" \
  "AMX: $(grep -qw amx_bf16 /proc/cpuinfo && echo yes || echo no); $epochs epochs, 2 ranks of 32, seeds: $seeds"
rows=()
for seed in $seeds; do
  for p in fp32 bf16 fp16; do
    read -r acc sps scale skipped path < <(one $p "$seed")
    echo "seed $seed $p: test accuracy $acc, $sps samples/s, loss scale $scale, skipped steps $skipped, kernels $path"
    rows+=("$seed $p $acc")
  done
done
printf '%s\n' "${rows[@]}" | python3 -c '
import collections, statistics, sys
acc = collections.defaultdict(dict)
for line in sys.stdin:
    seed, p, a = line.split()
    acc[p][seed] = float(a)
f32 = acc["fp32"]
for p in ("bf16", "fp16"):
    d = [100 * (acc[p][s] - f32[s]) for s in f32]
    print(f"{p}: mean test accuracy {100 * statistics.mean(acc[p].values()):.2f}% against fp32 "
          f"{100 * statistics.mean(f32.values()):.2f}%; difference per seed "
          + ", ".join(f"{x:+.2f}" for x in d) + f" points, mean {statistics.mean(d):+.2f} (target: within 0.5)")
'
