#!/usr/bin/env bash
# Activation checkpointing, what it costs and saves: a 12-layer gpt-mini (6 heads, 192 wide) at block
# 512, micro-batch 8, one rank on one core, trained STEPS steps by `lockstep train` with and without
# checkpointing every block (activation_checkpointing section). Reports peak RSS (/usr/bin/time) and
# seconds per step (summary.json's train_seconds / steps), median over REPS, and the two ratios the
# target is stated in: peak memory >= 40% lower, step time <= 40% higher.
#   bench/checkpointing.bench.sh [BUILD_DIR] [STEPS] [REPS]
set -euo pipefail
build=${1:-build}
steps=${2:-6}
reps=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cfg=$work/gpt12.yaml
cat > "$cfg" <<YAML
model: {name: gpt, model_type: gpt-mini, n_layer: 12, block_size: 512, dropout: 0.1}
data: {dataset: text, root: /usr/share/games/fortunes/cookie}   # one 245 KB file: a short validation
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 5.0e-4, betas: [0.9, 0.95], weight_decay: 0.1}}
gradient_clipping: 1.0
max_steps: $steps
steps_per_print: 1
eval: {every_epochs: 1000}
sample: {max_new_tokens: 0}
YAML
one() {  # one ck|plain: prints "rss_kib seconds_per_step"
  local out=$work/$1-$RANDOM extra=()
  [ "$1" = ck ] && extra=(--set activation_checkpointing.profile=false)
  /usr/bin/time -f "%M" -o "$out.rss" taskset -c 0 "$build/lockstep" train "$cfg" --output-dir "$out" "${extra[@]}" \
    --set checkpoint.every_steps=0 >/dev/null 2>&1
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(open(sys.argv[2]).read().split()[-1], s['train_seconds']/s['steps'])" \
    "$out/summary.json" "$out.rss"
}
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); 12-layer gpt-mini, block 512, batch 8, $steps steps, 1 rank"
declare -a plain_rss plain_t ck_rss ck_t
for ((i = 0; i < reps; i++)); do
  read -r r t < <(one plain); plain_rss+=("$r"); plain_t+=("$t")
  read -r r t < <(one ck); ck_rss+=("$r"); ck_t+=("$t")
  echo "rep $((i + 1)): plain ${plain_rss[-1]} KiB ${plain_t[-1]} s/step; checkpointed ${ck_rss[-1]} KiB ${ck_t[-1]} s/step" >&2
done
python3 - "${plain_rss[*]}" "${plain_t[*]}" "${ck_rss[*]}" "${ck_t[*]}" <<'PY'
import statistics as st, sys
pr, pt, cr, ct = ([float(v) for v in a.split()] for a in sys.argv[1:5])
pr, pt, cr, ct = st.median(pr), st.median(pt), st.median(cr), st.median(ct)
print(f"plain:        peak RSS {pr/1024:8.1f} MiB, {pt:.3f} s/step")
print(f"checkpointed: peak RSS {cr/1024:8.1f} MiB, {ct:.3f} s/step")
print(f"peak memory {100*(1-cr/pr):+.1f}% lower (target >= 40%), step time {100*(ct/pt-1):+.1f}% higher (target <= 40%)")
PY
