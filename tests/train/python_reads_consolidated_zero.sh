#!/usr/bin/env bash
# The PyPI `safetensors` client reads what `lockstep checkpoint consolidate` makes of a partitioned
# ZeRO checkpoint (DeepSpeed's zero_to_fp32.py): a stage-3 run on 2 ranks, its checkpoint
# consolidated, and every tensor must be f32 and equal the model the run ended with, by name.
#   python_reads_consolidated_zero.sh LOCKSTEP_BIN WORK_DIR VENV_DIR [PYTHON]
# VENV_DIR is the interop tests' cached virtual environment (torch_reads_model.sh makes it the same
# way: --system-site-packages, PyPI's safetensors). PyPI out of reach fails the test, loudly.
set -euo pipefail

lockstep=$1 work=$2 venv=$3 python=${4:-/usr/bin/python3}
fail() { echo "python_reads_consolidated_zero: FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/interop_venv.sh"

"$python" -c 'import numpy' 2>/dev/null ||
  fail "$python cannot import numpy (Debian: apt install python3-numpy; scripts/install-deps.sh does)"
interop_venv "$venv" "$python" "$work" "numpy"

rm -rf "$work"
mkdir -p "$work"
cat >"$work/config.yaml" <<YAML
model: {name: mlp, hidden: [8]}
data: {dataset: synthetic, size: 96, test_size: 32, input_shape: [6], num_classes: 3}
train_micro_batch_size_per_gpu: 6
gradient_accumulation_steps: 2
optimizer: {type: Adam, params: {lr: 0.01}}
epochs: 2
max_steps: 5
zero_optimization: {stage: 3}
YAML
"$lockstep" train "$work/config.yaml" --nproc-per-node 2 --output-dir "$work/run" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log" >&2; fail "lockstep train failed"; }
[ -f "$work/run/checkpoints/ckpt-5/zero/rank-00001-of-00002.safetensors" ] ||
  fail "no partitioned checkpoint in $work/run/checkpoints/ckpt-5"
"$lockstep" checkpoint consolidate "$work/run/checkpoints" "$work/fp32.safetensors" ||
  fail "lockstep checkpoint consolidate failed"

"$venv/bin/python" - "$work/fp32.safetensors" "$work/run/model.safetensors" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
got, want = load_file(sys.argv[1]), load_file(sys.argv[2])
assert sorted(got) == sorted(want), (sorted(got), sorted(want))
for name, w in want.items():
    g = got[name]
    assert g.dtype == np.float32 and g.shape == w.shape, (name, g.dtype, g.shape, w.shape)
    assert np.array_equal(g, w), name
print(f"python_reads_consolidated_zero: {len(got)} f32 tensors equal the trained model: OK")
PY
