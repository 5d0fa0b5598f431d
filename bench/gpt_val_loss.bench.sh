#!/usr/bin/env bash
# Same loss curve as PyTorch? `lockstep train examples/configs/gpt_fortunes.yaml` (gpt-mini, block 256,
# micro-batch 8, AdamW 5e-4, clipping 1.0, dropout 0.1, fortunes bytes) and its PyTorch twin
# (bench/scripts/torch_gpt.py, minGPT attention) train on exactly the same batches for STEPS steps, one
# rank each, side by side on their own cores. The batches are lockstep's: bench_train_order prints the
# order its trainer draws (its sampler and seed), and the peer reads it. Both validate on all validation
# windows at each epoch's end and at the last step. Initial weights and dropout masks come from each
# framework's own generator (same distributions), so the curves agree statistically, not bitwise.
#   bench/gpt_val_loss.bench.sh [BUILD_DIR] [STEPS] [LOG_EVERY]
# Prints the train loss every LOG_EVERY steps (that step's loss, as steps_per_print logs it) of both,
# then the validation losses and their relative difference; the target is within 2% after 2,000 steps.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-2000}
every=${3:-100}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$here/scripts/peer.sh"
peer_python "$build" gpt_val_loss.bench
corpus=/usr/share/games/fortunes
block=256
batch=8

# The training windows, counted as both sides count them: (train tokens - 1) / block, train = 90%.
windows=$(cd "$here/scripts" && "$python" -c "import sys, torch_gpt; t = torch_gpt.corpus(sys.argv[1]); \
print((int(len(t) * (1.0 - 0.1)) - 1) // $block)" "$corpus")
steps_per_epoch=$(((windows + batch - 1) / batch))
epochs=$(((steps + steps_per_epoch - 1) / steps_per_epoch))
eval_at=$(python3 -c "import sys; s, e = int(sys.argv[1]), int(sys.argv[2]); \
print(','.join(str(v) for v in sorted({*range(e, s, e), s})))" "$steps" "$steps_per_epoch")
"$build/bench/bench_train_order" --samples "$windows" --batch $batch --steps "$steps" --seed 1 >"$work/order.txt"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); torch: $("$python" -c 'import torch; print(torch.__version__)')"
echo "$windows training windows, $steps_per_epoch steps per epoch; validation after steps $eval_at"

taskset -c 0 "$build/lockstep" train "$root/examples/configs/gpt_fortunes.yaml" --output-dir "$work/ours" \
  --set max_steps="$steps" --set epochs="$epochs" --set steps_per_print="$every" \
  --set checkpoint.every_steps=0 --set tensorboard.enabled=false --set sample.max_new_tokens=0 \
  >"$work/ours.log" 2>&1 &
ours=$!
taskset -c $(($(nproc --all) > 1 ? 1 : 0)) "$python" "$here/scripts/torch_gpt.py" --corpus "$corpus" \
  --block-size $block --batch-size $batch --max-steps "$steps" --warmup-steps 0 --attention mingpt \
  --order-file "$work/order.txt" --eval-at "$eval_at" --log-every "$every" >"$work/theirs.log" 2>&1 &
theirs=$!
wait $ours || { echo "lockstep train failed:"; tail -20 "$work/ours.log"; exit 1; }
wait $theirs || { echo "torch_gpt.py failed:"; tail -20 "$work/theirs.log"; exit 1; }

python3 - "$work/ours/metrics.csv" "$work/theirs.log" "$work/ours.log" <<'EOF'
import csv, re, sys
ours_train, ours_val = {}, {}
for row in csv.reader(open(sys.argv[1])):
    if len(row) < 4 or not row[1].isdigit():
        continue
    if row[2] == "train/loss":
        ours_train[int(row[1])] = float(row[3])
    elif row[2] == "val/loss":
        ours_val[int(row[1])] = float(row[3])
theirs_train, theirs_val = {}, {}
for line in open(sys.argv[2]):
    m = re.match(r"(train|val) step=(\d+) (?:val_)?loss=([0-9.]+)", line)
    if m:
        (theirs_train if m[1] == "train" else theirs_val)[int(m[2])] = float(m[3])
if not ours_val or not theirs_val:
    sys.exit("no validation losses found: " + open(sys.argv[3]).read()[-2000:])
print(f"{'step':>6} {'lockstep train':>15} {'torch train':>12}")
for s in sorted(ours_train):
    print(f"{s:>6} {ours_train[s]:>15.4f} {theirs_train.get(s, float('nan')):>12.4f}")
print(f"{'step':>6} {'lockstep val':>15} {'torch val':>12} {'lockstep/torch - 1':>20}")
for s in sorted(ours_val):
    t = theirs_val.get(s, float("nan"))
    print(f"{s:>6} {ours_val[s]:>15.4f} {t:>12.4f} {100 * (ours_val[s] / t - 1):>+19.2f}%")
EOF
