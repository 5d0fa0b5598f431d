#!/usr/bin/env bash
# A change against its base, on lockstep's side of three benchmarks, runs alternating:
#   bench/compare_builds.sh BASE_BUILD NEW_BUILD [REPS]
# For each of REPS repetitions (default 3) runs, base first then new:
#   train_step   bench_train_step --batch 32,128 (one core; bench/train_step.sh's lockstep side): ms/step
#   ddp          examples/train_fashion_mnist at 1 and 2 ranks (bench/ddp.bench.sh's): samples/s
#   gpt          lockstep train examples/configs/gpt_fortunes.yaml at 1 and 2 ranks (bench/gpt.bench.sh's): tokens/s
# then prints each figure's median for both builds and new / base (a rate: > 1 is faster; ms: < 1).
# A build directory needs lockstep, bench/bench_train_step and examples/train_fashion_mnist. Run it on
# an otherwise idle machine: the two builds share it in turns, so a neighbour's load lands on both.
set -euo pipefail
base=$1 new=$2 reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
port=$((29500 + RANDOM % 150))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$here/scripts/peer.sh"  # run_ranks
for b in "$base" "$new"; do
  for f in lockstep bench/bench_train_step examples/train_fashion_mnist; do
    [[ -x $b/$f ]] || { echo "compare_builds: $b/$f is missing (build it first)" >&2; exit 2; }
  done
done

train_step() {  # BUILD -> "ms32 ms128"
  taskset -c 0 "$1/bench/bench_train_step" --batch 32,128 --steps 200 |
    sed -n 's/.*batch=\([0-9]*\) .*step_ms=\([0-9.]*\).*/\2/p' | tr '\n' ' '
}
ddp() {  # BUILD WORLD -> samples/s
  run_ranks "$2" "$1/examples/train_fashion_mnist" --epochs 1 --max-steps 600 --warmup-steps 20 --batch-size 32 \
    --num-workers 0 --gradient-as-bucket-view 2>/dev/null | sed -n 's/.*samples_per_second=\([0-9.]*\).*/\1/p' | tail -n 1
}
gpt() {  # BUILD WORLD -> tokens/s
  local out=$work/gpt-$RANDOM
  run_ranks "$2" "$1/lockstep" train "$root/examples/configs/gpt_fortunes.yaml" --output-dir "$out" \
    --set max_steps=40 --set checkpoint.every_steps=0 --set tensorboard.enabled=false \
    --set sample.max_new_tokens=0 >/dev/null 2>&1
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens_per_second'])" "$out/summary.json"
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc --all) cores; base $base, new $new, $reps repetitions"
declare -A r
for ((i = 1; i <= reps; i++)); do
  for which in base new; do
    b=$base
    [[ $which == new ]] && b=$new
    read -r s32 s128 <<<"$(train_step "$b")"
    r[$which.train_step_b32_ms]+=" $s32"
    r[$which.train_step_b128_ms]+=" $s128"
    r[$which.ddp_1rank_samples_s]+=" $(ddp "$b" 1)"
    r[$which.ddp_2ranks_samples_s]+=" $(ddp "$b" 2)"
    r[$which.gpt_1rank_tokens_s]+=" $(gpt "$b" 1)"
    r[$which.gpt_2ranks_tokens_s]+=" $(gpt "$b" 2)"
    echo "rep $i $which done" >&2
  done
done
for k in train_step_b32_ms train_step_b128_ms ddp_1rank_samples_s ddp_2ranks_samples_s gpt_1rank_tokens_s gpt_2ranks_tokens_s; do
  python3 - "$k" "${r[base.$k]}" "${r[new.$k]}" <<'PY'
import statistics, sys
k, b, n = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
mb, mn = statistics.median(b), statistics.median(n)
better = "lower is faster" if k.endswith("_ms") else "higher is faster"
print(f"{k:22s} base {mb:10.2f}  new {mn:10.2f}  new/base {mn / mb:.3f} ({better}; runs base {b}, new {n})")
PY
done
