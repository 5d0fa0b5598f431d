#!/usr/bin/env bash
# Issue 42's equivalence and memory targets, run as a user runs `lockstep train`.
#
# Equivalence: gpt-mini (block 64, dropout
# 0.1, embedding tied across the stages) and ResNet-18 (CIFAR) trained 20 steps on 2 stages x 1
# replica, 2 x 2 and 4 x 1, with 1F1B, GPipe and interleaved 1F1B (2 chunks per stage), each against the run it must equal: one process
# with one thread on the same global batch and micro-batches (gpt-mini at 2 replicas too: each
# replica draws its samples' part of that process's dropout masks), or for ResNet-18 at 2 replicas
# a DDP run of 2 ranks with the same micro-batches (batch norm normalises over each replica's own
# micro-batch, as over each DDP rank's). Prints the largest weight difference
# relative to the largest weight, as the tests' safetensorsRelDiff; the target is 1e-6.
#
# Memory: with 1F1B a stage holds at most `stages - s` micro-batches' activations, with GPipe all M
# of them, with interleaved 1F1B (3 chunks per stage) its warm-up's chunks; each rank's peak RSS
# (summary.json's pipeline.ranks) shows it. gpt-mini (block 256) on 2 stages, MICRO_BATCHES (8)
# micro-batches of 8 sequences, AdamW, 2 steps with each schedule.
#   bash bench/pipeline_targets.bench.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-20}
micro_batches=${MICRO_BATCHES:-8}
lockstep=$build/lockstep
[ -x "$lockstep" ] || { echo "pipeline_targets: build lockstep first (make build)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores; $steps steps each"

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
model: {name: gpt, model_type: gpt-mini, block_size: 64, dropout: 0.1}
data: {dataset: tokens, root: $work/tok}
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 8
optimizer: {type: SGD, params: {lr: 0.1, momentum: 0.9}}
gradient_clipping: 1.0
max_steps: $steps
steps_per_print: 100
sample: {max_new_tokens: 0}
YAML
cat > "$work/resnet.yaml" <<YAML
model: {name: resnet18_cifar}
data: {dataset: synthetic, size: 2048, test_size: 8, input_shape: [3, 32, 32], num_classes: 10}
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 8
optimizer: {type: AdamW, params: {lr: 0.001, weight_decay: 0.01}}
max_steps: $steps
steps_per_print: 100
YAML

reldiff() {
  python3 - "$1" "$2" <<'PY'
import array, json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        s, e = v["data_offsets"]
        a = array.array("f")
        a.frombytes(b[8 + n + s:8 + n + e])
        out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
d = max(abs(x - y) for k in b for x, y in zip(a[k], b[k]))
m = max(abs(y) for k in b for y in b[k])
print(f"{d / m:.2e}")
PY
}

train() {  # train OUT CONFIG ARGS...
  local out=$1 cfg=$2
  shift 2
  "$lockstep" train "$cfg" --output-dir "$work/$out" "$@" >"$work/$out.log" 2>&1 ||
    { echo "pipeline_targets: $out failed:" >&2; tail -n 20 "$work/$out.log" >&2; exit 1; }
}

echo
echo "| model | layout | schedule | reference | max rel. weight difference |"
echo "|---|---|---|---|---|"
for model in gpt resnet; do
  cfg=$work/$model.yaml
  extra=()
  [ "$model" = gpt ] && extra=(--set pipeline.partition_method=type:Block)
  train "$model-one" "$cfg"                                        # 1 replica's reference
  if [ "$model" = gpt ]; then                                      # 2 replicas'
    train "$model-wide" "$cfg" --set train_micro_batch_size_per_gpu=4
  else
    train "$model-ddp" "$cfg" --nproc-per-node 2
  fi
  for layout in 2x1 2x2 4x1; do
    stages=${layout%x*} replicas=${layout#*x}
    ranks=$((stages * replicas))
    for schedule in 1f1b gpipe interleaved_1f1b; do
      out=$model-$layout-$schedule
      chunks=1
      [ "$schedule" = interleaved_1f1b ] && chunks=2
      train "$out" "$cfg" --nproc-per-node "$ranks" --oversubscribe --set pipeline.stages="$stages" \
        --set pipeline.schedule="$schedule" --set pipeline.virtual_stages=$chunks "${extra[@]}"
      ref=$model-one
      if [ "$replicas" = 2 ]; then ref=$model-ddp; [ "$model" = gpt ] && ref=$model-wide; fi
      echo "| $model | $stages stages x $replicas | $schedule | $ref | $(reldiff "$work/$out/model.safetensors" "$work/$ref/model.safetensors") |"
    done
  done
done

cat > "$work/memory.yaml" <<YAML
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
for schedule in 1f1b gpipe interleaved_1f1b; do
  chunks=1
  [ "$schedule" = interleaved_1f1b ] && chunks=3
  train "memory-$schedule" "$work/memory.yaml" --nproc-per-node 2 --set pipeline.stages=2 \
    --set pipeline.schedule="$schedule" --set pipeline.virtual_stages=$chunks --set pipeline.partition_method=type:Block
  python3 - "$work/memory-$schedule/summary.json" "$schedule" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["pipeline"]["ranks"]:
    print(f"| {sys.argv[2]} | {r['stage']} | {r['activation_slots']} | {r['peak_rss_bytes'] / 2**20:.1f} | "
          f"{r['model_state_bytes_resident'] / 2**20:.2f} |")
PY
done
