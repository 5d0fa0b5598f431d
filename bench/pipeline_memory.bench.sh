#!/usr/bin/env bash
# Issue 42's memory target: with 1F1B a stage holds at most `stages - s` micro-batches'
# activations, with GPipe all M of them; each rank's peak RSS (summary.json's pipeline.ranks) shows
# it. gpt-mini (block 256, dropout 0.1) on 2 stages, 8 micro-batches of 8 sequences, AdamW, one
# thread per rank, 2 steps with each schedule.
#   bash bench/pipeline_memory.bench.sh [BUILD_DIR] [MICRO_BATCHES]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
micro_batches=${2:-8}
lockstep=$build/lockstep
[ -x "$lockstep" ] || { echo "pipeline_memory: build lockstep first (make build)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores"
python3 - "$work/corpus.txt" <<'PY'
import random, sys
random.seed(0)
words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jolly boxing frogs".split()
with open(sys.argv[1], "w") as f:
    for _ in range(4000):
        f.write(" ".join(random.choice(words) for _ in range(12)) + ".\n")
PY
"$lockstep" data tokenize "$work/corpus.txt" -o "$work/tok" --val-fraction 0.1 >/dev/null
cat > "$work/gpt.yaml" <<YAML
model: {name: gpt, model_type: gpt-mini, block_size: 256, dropout: 0.1}
data: {dataset: tokens, root: $work/tok}
train_micro_batch_size_per_gpu: 8
gradient_accumulation_steps: $micro_batches
optimizer: {type: AdamW, params: {lr: 0.001}}
max_steps: 2
steps_per_print: 100
sample: {max_new_tokens: 1}
YAML
echo
echo "| schedule | stage | activation slots | peak RSS (MiB) | model state resident (MiB) |"
echo "|---|---|---|---|---|"
for schedule in 1f1b gpipe; do
  "$lockstep" train "$work/gpt.yaml" --nproc-per-node 2 --output-dir "$work/$schedule" \
    --set pipeline.stages=2 --set pipeline.schedule="$schedule" --set pipeline.partition_method=type:Block \
    >"$work/$schedule.log" 2>&1 || { tail -n 20 "$work/$schedule.log" >&2; exit 1; }
  python3 - "$work/$schedule/summary.json" "$schedule" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["pipeline"]["ranks"]:
    print(f"| {sys.argv[2]} | {r['stage']} | {r['activation_slots']} | {r['peak_rss_bytes'] / 2**20:.1f} | "
          f"{r['model_state_bytes_resident'] / 2**20:.2f} |")
PY
done
