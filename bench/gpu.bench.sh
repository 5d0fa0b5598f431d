#!/usr/bin/env bash
# lockstep against PyTorch on one GPU, same machine, same run (issue 20's targets): the seed CNN at
# batch 32 and 128 and the CIFAR ResNet-18 at batch 256, f32 and bf16, PyTorch eager, torch.compile
# and torch.compile(mode="reduce-overhead") (CUDA graphs). Run it where the GPU is, with the
# programs packed by scripts/gpu-bundle.sh (the lent GPU machine has PyTorch but not lockstep's
# libraries):
#   here:  bash scripts/gpu-bundle.sh .gpu build/bench/bench_gpu_step
#   there: bash bench/gpu.bench.sh .gpu
# Prints both sides' lines, then lockstep's samples/s over each PyTorch mode's for every case.
set -euo pipefail
bundle=${1:-.gpu}
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
source scripts/gpu-env.sh "$bundle"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
out=$(mktemp -d)
bench_gpu_step --steps "${STEPS:-500}" | tee "$out/lockstep.txt"
(cd bench/scripts && PYTHONUNBUFFERED=1 python3 torch_gpu_step.py --steps "${STEPS:-500}" 2>/dev/null) |
  grep -v Warning | tee "$out/torch.txt"
python3 - "$out/lockstep.txt" "$out/torch.txt" <<'PY'
import re, sys
def rows(path):
    out = {}
    for line in open(path):
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        if "samples_per_s" in kv:
            out[(kv["impl"], kv["model"], kv["batch"], kv["dtype"])] = float(kv["samples_per_s"])
    return out
ours, theirs = rows(sys.argv[1]), rows(sys.argv[2])
print("model batch dtype  lockstep/torch-eager  /torch-compile  /torch-reduce-overhead")
for (impl, model, batch, dtype), v in sorted(ours.items()):
    ratios = [f"{v / theirs[(m, model, batch, dtype)]:.2f}" if (m, model, batch, dtype) in theirs else "-"
              for m in ("torch-eager", "torch-compile", "torch-reduce-overhead")]
    print(model, batch, dtype, impl, *ratios)
PY
