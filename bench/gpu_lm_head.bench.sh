#!/usr/bin/env bash
# GPT-2 small's output layer and loss alone on one GPU (16 x 1024 rows of 768, 50,257 words), the
# two ways lockstep can take it: fused (autograd::linearCrossEntropy, chunk by chunk with the
# vocabulary padded to 16 bytes: what lockstep train's language models use) and composed (the
# logits of every row, then cross entropy: what LOCKSTEP_FUSED_LM_LOSS=0 gives). Time and peak GPU
# memory of a forward + backward, bf16 (autocast, f32 weight) and f32. Run it where the GPU is:
#   here:  bash scripts/gpu-check.sh          (the bundle carries bench_lm_head)
#   there: bash bench/gpu_lm_head.bench.sh .gpu        (OUT_DIR=$OUT/head to keep the lines)
# A few seconds a case.
set -uo pipefail
bundle=${1:-.gpu}
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/scripts/gpu_bench.sh
source bench/scripts/gpu_bench.sh
gpu_bench_start "$bundle"
{
  for dtype in bf16 f32; do
    for impl in fused composed; do
      bench_lm_head --device cuda --dtype "$dtype" --impl "$impl" --rows "${ROWS:-16384}" --steps "${STEPS:-5}" ||
        echo "(bench_lm_head --dtype $dtype --impl $impl exited $?)"
    done
  done
} | tee "$out/lm_head.txt"
