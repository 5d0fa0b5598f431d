#!/usr/bin/env bash
# Real clients read what `lockstep train` writes: trains mnist_cnn on Fashion-MNIST for a few
# steps with the built CLI, then torch_reads_model.py opens model.safetensors with the PyPI
# `safetensors` package and Debian's PyTorch, loads it into seed 001's Net (strict) and must reproduce
# summary.json's test loss and accuracy.
#   torch_reads_model.sh LOCKSTEP_BIN WORK_DIR VENV_DIR DATA_DIR [PYTHON]
# VENV_DIR is made once (python -m venv --system-site-packages, so Debian's python3-torch is seen)
# and reused while it can import safetensors and torch. PyPI out of reach fails the test, loudly.
set -euo pipefail

lockstep=$1 work=$2 venv=$3 data=$4 python=${5:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "torch_reads_model: FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/interop_venv.sh"

"$python" -c 'import torch, numpy' 2>/dev/null ||
  fail "$python cannot import torch and numpy (Debian: apt install python3-torch python3-numpy; scripts/install-deps.sh does)"
[ -f "$data/t10k-images-idx3-ubyte.gz" ] ||
  fail "no Fashion-MNIST in $data (Debian: apt install dataset-fashion-mnist; scripts/install-deps.sh does)"

interop_venv "$venv" "$python" "$work" "torch, numpy"

rm -rf "$work"
mkdir -p "$work"
mean=0.2860 std=0.3530
cat >"$work/config.yaml" <<YAML
model: mnist_cnn
data:
  dataset: fashion_mnist
  root: $data
  num_workers: 0
  transforms:
    normalize: {mean: $mean, std: $std}
train_micro_batch_size_per_gpu: 32
optimizer: {type: Adam, params: {lr: 1.0e-3}}
epochs: 1
max_steps: 100
seed: 3
steps_per_print: 50
YAML
code=0
LOCKSTEP_NUM_THREADS=1 "$lockstep" train "$work/config.yaml" --output-dir "$work/run" >"$work/train.log" 2>&1 || code=$?
[ $code -eq 0 ] || { cat "$work/train.log" >&2; fail "lockstep train exited with $code"; }
tail -1 "$work/train.log"
"$venv/bin/python" "$here/torch_reads_model.py" "$work/run" --data-dir "$data" --mean $mean --std $std
