#!/usr/bin/env bash
# The progress line on a real terminal: `lockstep train --nproc-per-node 2` runs in an 80-column
# tmux pane; the agent owns the terminal and draws the line rank 0 reports through the side
# channel. The pane must show one updating progress line (not a scroll of them), never wrapped.
#   progress_tmux.sh LOCKSTEP_BIN WORK_DIR
set -euo pipefail

lockstep=$1 work=$2
fail() { echo "progress_tmux: FAIL: $*" >&2; exit 1; }
command -v tmux >/dev/null || fail "needs tmux (apt install tmux; scripts/install-deps.sh does)"

rm -rf "$work"
mkdir -p "$work"
cat >"$work/c.yaml" <<'YAML'
model: {name: mlp, hidden: [64]}
data: {dataset: synthetic, size: 30000, test_size: 64, input_shape: [32], num_classes: 3}
train_micro_batch_size_per_gpu: 4
optimizer: {type: Adam, params: {lr: 0.01}}
epochs: 2
steps_per_print: 50
YAML
sock="lockstep-test-$$"
tm() { tmux -L "$sock" "$@"; }
trap 'tm kill-server 2>/dev/null || true' EXIT
tm -f /dev/null new-session -d -x 80 -y 30 -s t \
  "LOCKSTEP_NUM_THREADS=1 '$lockstep' train '$work/c.yaml' --nproc-per-node 2 --output-dir '$work/o'; echo EXIT=\$?; sleep 600"
n=0
for _ in $(seq 1 1200); do
  tm capture-pane -p -J -t t >"$work/cap.$n"
  grep -q '^EXIT=' "$work/cap.$n" && break
  n=$((n + 1))
  sleep 0.1
done
final="$work/cap.$n"
grep -q '^EXIT=0' "$final" || { cat "$final" >&2; fail "the run did not end with 0 within 120 s"; }

steps=()
for f in "$work"/cap.*; do
  lines=$(grep -cE 'step [0-9]+/[0-9]+' "$f" || true)
  [ "$lines" -le 1 ] || { cat "$f" >&2; fail "$f shows $lines progress lines: a scroll, not one updating line"; }
  line=$(grep -E 'step [0-9]+/[0-9]+' "$f" || true)
  [ -z "$line" ] && continue
  # capture-pane -J joins a wrapped line back together: longer than 79 columns means it wrapped.
  [ ${#line} -le 79 ] || fail "the progress line is ${#line} columns in an 80-column pane: '$line'"
  [[ "$line" == *"samples/s"* && "$line" == *"ETA"* ]] || fail "no samples/s or ETA in '$line'"
  steps+=("$(sed -E 's/.*step ([0-9]+)\/.*/\1/' <<<"$line")")
done
distinct=$(printf '%s\n' "${steps[@]}" | sort -un | wc -l)
[ "$distinct" -ge 3 ] || { cat "$final" >&2; fail "the progress line showed only $distinct distinct steps: not updating"; }
grep -q 'val_accuracy=' "$final" || { cat "$final" >&2; fail "rank 0's validation lines are missing"; }
used=$(grep -c . "$final" || true)
[ "$used" -le 12 ] || { cat "$final" >&2; fail "the pane holds $used lines: the output scrolled"; }
echo "one progress line, ${#steps[@]} captures, $distinct distinct steps; final pane:"
cat "$final"
