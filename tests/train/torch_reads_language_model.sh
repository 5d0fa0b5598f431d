#!/usr/bin/env bash
# The language models `lockstep train` writes are their originals: trains a small gpt and a small llama
# (grouped-query attention) on a tokenized text for a few steps with the built CLI, then
# torch_reads_language_model.py loads each model.safetensors (PyPI's safetensors) into a PyTorch twin
# (Debian's PyTorch) and must reproduce summary.json's val_loss.
#   torch_reads_language_model.sh LOCKSTEP_BIN WORK_DIR VENV_DIR [PYTHON]
# VENV_DIR is the one torch_reads_model.sh makes (system site packages + safetensors); made here too if absent.
set -euo pipefail

lockstep=$1 work=$2 venv=$3 python=${4:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "torch_reads_language_model: FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/interop_venv.sh"

"$python" -c 'import torch, numpy' 2>/dev/null ||
  fail "$python cannot import torch and numpy (Debian: apt install python3-torch python3-numpy; scripts/install-deps.sh does)"
interop_venv "$venv" "$python" "$work" "torch, numpy"

rm -rf "$work"
mkdir -p "$work"
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog, $((i * 7 % 13)) times."; done >"$work/text.txt"
"$lockstep" data tokenize "$work/text.txt" -o "$work/tok" --val-fraction 0.1 >/dev/null
for model in "name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, dropout: 0.1" \
             "name: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, intermediate_size: 88, block_size: 32"; do
  name=$(echo "$model" | sed 's/name: \([a-z]*\),.*/\1/')
  cat >"$work/$name.yaml" <<YAML
model: {$model}
data: {dataset: tokens, root: $work/tok}
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 3.0e-3, weight_decay: 0.1}}
max_steps: 40
steps_per_print: 20
seed: 5
sample: {max_new_tokens: 0}
YAML
  code=0
  LOCKSTEP_NUM_THREADS=1 "$lockstep" train "$work/$name.yaml" --output-dir "$work/$name" >"$work/$name.log" 2>&1 || code=$?
  [ $code -eq 0 ] || { cat "$work/$name.log" >&2; fail "lockstep train ($name) exited with $code"; }
  "$venv/bin/python" "$here/torch_reads_language_model.py" "$work/$name" "$work/tok"
done
