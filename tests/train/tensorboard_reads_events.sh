#!/usr/bin/env bash
# TensorBoard's own reader (EventAccumulator, PyPI's tensorboard) reads the event files
# `lockstep train` writes, and metrics reach disk as they happen:
#  1. a whole run: every tag (train/*, val/*, test/*, memory/*) at every step metrics.csv has, and
#     DeepSpeed's (Train/Samples/train_loss, Train/Samples/lr) at every step, counted in samples;
#  2. a run killed with SIGKILL mid-epoch: metrics.csv and the event file hold the same steps up to
#     the last one printed (a crash loses at most one steps_per_print interval; the kill may land
#     between the two files' flushes, leaving one of them a step ahead past that point).
#   tensorboard_reads_events.sh LOCKSTEP_BIN WORK_DIR VENV_DIR [PYTHON]
# VENV_DIR is made once (python -m venv) and reused while it can import tensorboard. PyPI out of
# reach fails the test, loudly.
set -euo pipefail

lockstep=$1 work=$2 venv=$3 python=${4:-/usr/bin/python3}
tensorboard_req=${LOCKSTEP_TENSORBOARD_REQUIREMENT:-tensorboard==2.21.0}
fail() { echo "tensorboard_reads_events: FAIL: $*" >&2; exit 1; }

source "$(dirname "$0")/interop_venv.sh"
python_venv "$venv" "$python" "$work" "$tensorboard_req" tensorboard

rm -rf "$work"
mkdir -p "$work"
cat >"$work/reader.py" <<'PY'
# reader.py RUN_DIR BATCH [--upto STEP]: compares the event file with metrics.csv, tag by tag and step by
# step, and checks DeepSpeed's tags.
import csv, glob, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
(events_dir,) = {p.rsplit('/', 1)[0] for p in glob.glob(run + '/tensorboard/**/events.out.tfevents.*', recursive=True)}
acc = EventAccumulator(events_dir, size_guidance={'scalars': 0})
acc.Reload()
tb = {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}
# DeepSpeed's monitor tags, every step at the samples seen: the train/loss steps times the batch.
deepspeed = {tag: tb.pop(tag) for tag in list(tb) if tag.startswith('Train/Samples/')}
assert sorted(deepspeed) == ['Train/Samples/lr', 'Train/Samples/train_loss'], sorted(deepspeed)
batch = int(sys.argv[2])
for tag, steps in deepspeed.items():
    assert steps == [batch * k for k in range(1, len(steps) + 1)], (tag, steps[:5])
rows = {}
with open(run + '/metrics.csv') as f:
    for r in csv.DictReader(f):
        rows.setdefault(r['metric'], []).append(int(r['step']))
upto = int(sys.argv[4]) if len(sys.argv) > 4 else None
assert tb.keys() == rows.keys(), ('tags differ', sorted(tb), sorted(rows))
for tag in rows:
    # A kill may land between the CSV's flush and the event file's, after the last printed step:
    # up to that step both hold the same; past it either may be one interval ahead.
    a = [s for s in tb[tag] if upto is None or s <= upto]
    b = [s for s in rows[tag] if upto is None or s <= upto]
    assert a == b, (tag, tb[tag], rows[tag])
print(' '.join('%s:%d' % (t, len(s)) for t, s in sorted({**tb, **deepspeed}.items())))
if upto is not None:
    assert max(tb['train/loss']) >= upto, ('event file lost printed steps', max(tb['train/loss']), upto)
    assert max(rows['train/loss']) >= upto, ('metrics.csv lost printed steps', max(rows['train/loss']), upto)
    assert 'val/loss' not in tb, 'killed mid-epoch, yet validated'
    print('last printed step %d, last recorded %d' % (upto, max(tb['train/loss'])))
PY

# 1. A whole run: every tag and step.
cat >"$work/whole.yaml" <<'YAML'
model: {name: mlp, hidden: [8]}
data: {dataset: synthetic, size: 96, test_size: 32, input_shape: [6], num_classes: 3}
train_micro_batch_size_per_gpu: 8
optimizer: {type: Adam, params: {lr: 0.01}}
epochs: 3
steps_per_print: 4
tensorboard: {enabled: true}
YAML
"$lockstep" train "$work/whole.yaml" --output-dir "$work/whole" >"$work/whole.log" 2>&1 ||
  { cat "$work/whole.log" >&2; fail "lockstep train exited with $?"; }
out=$("$venv/bin/python" "$work/reader.py" "$work/whole" 8) || fail "the whole run's events and CSV differ: $out"
echo "whole run: $out"
for tag in train/loss train/lr train/samples_per_sec memory/max_rss_mib val/loss val/accuracy test/loss test/accuracy \
  Train/Samples/train_loss Train/Samples/lr; do
  [[ " $out" == *" $tag:"* ]] || fail "no $tag in the event file: $out"
done

# 2. Killed mid-epoch: one long epoch, SIGKILL after a few printed steps.
cat >"$work/long.yaml" <<'YAML'
model: {name: mlp, hidden: [64]}
data: {dataset: synthetic, size: 200000, test_size: 32, input_shape: [32], num_classes: 3}
train_micro_batch_size_per_gpu: 8
optimizer: {type: Adam, params: {lr: 0.01}}
epochs: 1
steps_per_print: 7
tensorboard: {enabled: true}
YAML
LOCKSTEP_NUM_THREADS=1 "$lockstep" train "$work/long.yaml" --output-dir "$work/long" >"$work/long.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ "$(grep -c '^epoch 1 step' "$work/long.log" || true)" -ge 5 ] && break
  kill -0 $pid 2>/dev/null || { cat "$work/long.log" >&2; fail "the run ended before it could be killed"; }
  sleep 0.05
done
kill -9 $pid
wait $pid 2>/dev/null || true
last=$(grep '^epoch 1 step' "$work/long.log" | tail -1 | sed -E 's/^epoch 1 step ([0-9]+)\/.*/\1/')
[ -n "$last" ] || { cat "$work/long.log" >&2; fail "no step was printed before the kill"; }
out=$("$venv/bin/python" "$work/reader.py" "$work/long" 8 --upto "$last") || fail "after kill -9: $out"
echo "killed run: $out"
