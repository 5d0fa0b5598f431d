#!/usr/bin/env bash
# lockstep against PyTorch on one GPU, same machine, same run, for language models (issue 39's
# comparison): gpt-mini at batch 64 x block 256 (vocabulary 256, dropout 0.1) and GPT-2 small at
# 16 x 1024 (vocabulary 50257, dropout 0), f32 (TF32 off on both sides) and bf16 autocast, AdamW
# and cross entropy over every position on fixed random tokens (bench/gpu_lm.cpp,
# bench/scripts/torch_gpu_lm.py). Run it where the GPU is, with the programs packed by
# scripts/gpu-check.sh or scripts/gpu-bundle.sh (the lent GPU machine has PyTorch but not lockstep's
# libraries):
#   here:  bash scripts/gpu-bundle.sh .gpu build/bench/bench_gpu_lm
#   there: bash bench/gpu_lm.bench.sh .gpu         (OUT_DIR=$OUT/lm to keep the logs)
# lockstep runs eagerly and as a replayed CUDA graph (StepGraph): lockstep-eager, lockstep-graph.
# PyTorch runs eager (fused AdamW, SDPA), torch.compile of the model and its loss (nanoGPT's) and,
# when TORCH_MODES names it, torch.compile(mode="reduce-overhead") (CUDA graphs). MFU is nanoGPT's
# 6N + 12LHQT FLOPs per token over the GPU's dense bf16 peak (f32 too), on both sides against the
# peak bench_gpu_lm prints (lockstep/train/monitor/model_flops.cpp; LOCKSTEP_GPU_PEAK_TFLOPS sets it).
#
# Environment:
#   OUT_DIR   where the raw lines and logs go (default: a new mktemp -d); summary.md there too
#   MODELS    default gpt2,gpt-mini (GPT-2 first, so that the PyTorch budget drops gpt-mini's
#             compiled cases first)
#   DTYPES    default bf16,f32 (bf16 first, for the same reason)
#   STEPS     timed steps per gpt-mini case (default 60; GPT-2 STEPS/4, at least 10, after 5 warmup)
#   LOCKSTEP_MODES   default eager,graph,master (master: bf16 parameters with f32 master weights,
#                    ZeRO stage 1 on one rank: no per-forward weight casts; bf16 cases only)
#   TORCH_MODES      default eager,compile (add reduce-overhead: about a minute more per GPT-2 case)
#   TORCH_BUDGET_S   PyTorch starts no case after this many seconds (default 120)
#   LOCKSTEP_LIMIT_S, TORCH_LIMIT_S   hard limits for the lockstep run and for PyTorch (150, 210 s)
#
# Time on an H100 with the defaults (estimates: this script was never run): lockstep about 1-1.5
# minutes (gpt-mini ~5 s a case at the issue's 240,000 tokens/s, GPT-2 f32 ~10 s, bf16 ~5 s a case
# plus ~3 s to build and initialise its 124M parameters, 8 cases); PyTorch about 3 minutes: importing
# it ~15 s, the 4 eager cases ~15 s, each torch.compile ~30 s (gpt-mini) to ~60 s (GPT-2), 4 of them,
# the last ones `skipped:` if the 120 s budget is spent. In all about 4-5 minutes, never over ~6.3
# (the limits add up to 360 s).
#
# Prints a header (GPU, driver, cuDNN, CUDA, PyTorch, the peak), both sides' lines, then the tables:
# PyTorch's tokens/s and MFU per mode; for every model, dtype and lockstep impl its tokens/s, MFU and
# its ratio to each PyTorch mode's; and whether both sides' models have the same parameter count.
set -uo pipefail
bundle=${1:-.gpu}
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/scripts/gpu_bench.sh
source bench/scripts/gpu_bench.sh
gpu_bench_start "$bundle"
models=${MODELS:-gpt2,gpt-mini}
dtypes=${DTYPES:-bf16,f32}
steps=${STEPS:-60}

echo "== lockstep: bench_gpu_lm --models $models --dtypes $dtypes --steps $steps (stderr: $out/lockstep.log)"
lockstep_run lockstep "${LOCKSTEP_LIMIT_S:-150}" bench_gpu_lm --models "$models" --dtypes "$dtypes" --steps "$steps" \
  --modes "${LOCKSTEP_MODES:-eager,graph,master}"

# The peak MFU is measured against: lockstep's (its table, or LOCKSTEP_GPU_PEAK_TFLOPS), for PyTorch too.
peak=$(sed -n 's/^gpu=.* peak_flops=\([0-9][0-9]*\).*/\1/p' "$out/lockstep.txt" | head -n 1)
peak_args=()
if [ -n "$peak" ]; then peak_args=(--peak-flops "$peak"); else echo "(no GPU peak from bench_gpu_lm: no MFU)"; fi

echo "== PyTorch: torch_gpu_lm.py --models $models --dtypes $dtypes --steps $steps (stderr: $out/torch.log)"
torch_run torch "${TORCH_LIMIT_S:-210}" torch_gpu_lm.py --models "$models" --dtypes "$dtypes" --steps "$steps" \
  "${peak_args[@]}" --modes "${TORCH_MODES:-eager,compile}" --budget-s "${TORCH_BUDGET_S:-120}"

echo "== summary ($out/summary.md)"
LD_LIBRARY_PATH=$host_ld python3 - "$out" <<'PY' | tee "$out/summary.md"
import sys

sys.path.insert(0, "bench/scripts")
from gpu_summary import TORCH, read_lines

def read(name):
    """The version line's keys, {(impl, model, dtype): the case's keys or why there are none} and
    {model: parameters}."""
    versions, lines = read_lines(sys.argv[1], name)
    rows = {(kv["impl"], kv["model"], kv["dtype"]): kv if "tokens_per_s" in kv else why for kv, why in lines}
    params = {kv["model"]: int(kv["params"]) for kv, _ in lines if "params" in kv}
    return versions, rows, params

lv, ours, our_params = read("lockstep.txt")
tv, theirs, their_params = read("torch.txt")
print(f"GPU: {lv.get('gpu') or tv.get('gpu', '?')} (sm_{lv.get('sm') or tv.get('sm', '?')}); "
      f"driver {lv.get('driver') or tv.get('driver', '?')} (CUDA {lv.get('driver_cuda', '?')}); "
      f"dense bf16 peak {lv.get('peak_flops', '?')} FLOP/s")
print(f"lockstep: cuDNN {lv.get('cudnn', '?')} (built with {lv.get('cudnn_built', '?')}), "
      f"CUDA runtime {lv.get('cuda_runtime', '?')}")
print(f"PyTorch {tv.get('torch', '?')}: cuDNN {tv.get('cudnn', '?')}, CUDA {tv.get('cuda', '?')}")
print()

def tps(row):
    return float(row["tokens_per_s"]) if isinstance(row, dict) else None

def cell(row):
    if not isinstance(row, dict):
        return row or "-"
    mfu = f" ({100 * float(row['mfu']):.1f}%)" if "mfu" in row else ""
    return f"{float(row['tokens_per_s']):,.0f}{mfu}"

order = {m: i for i, m in enumerate(["gpt-mini", "gpt2"])}
rows = {k: v for k, v in list(ours.items()) + list(theirs.items()) if isinstance(v, dict)}
shape = {k[1]: f"{v['batch']} x {v['block']}" for k, v in rows.items()}
cases = sorted({k[1:] for k in list(ours) + list(theirs)}, key=lambda c: (order.get(c[0], 9), c[1]))
print("tokens/s (MFU)")
print()
print("| model | batch x block | dtype | torch eager | torch.compile | reduce-overhead |")
print("|---|---|---|---|---|---|")
for m, d in cases:
    print(f"| {m} | {shape.get(m, '?')} | {d} | " + " | ".join(cell(theirs.get((t, m, d))) for t in TORCH) + " |")
print()
print("| model | batch x block | dtype | lockstep impl | tokens/s (MFU) | / torch eager | / torch.compile | / reduce-overhead |")
print("|---|---|---|---|---|---|---|---|")
impls = ["lockstep-eager", "lockstep-graph"]
impls += sorted({k[0] for k in ours} - set(impls))
for m, d in cases:
    for impl in impls:
        if (impl, m, d) not in ours:
            continue
        v = tps(ours[(impl, m, d)])
        peers = [tps(theirs.get((t, m, d))) for t in TORCH]
        ratios = [f"{v / p:.2f}" if v and p else "-" for p in peers]
        print(f"| {m} | {shape.get(m, '?')} | {d} | {impl} | {cell(ours[(impl, m, d)])} | " + " | ".join(ratios) + " |")
print()
for m in sorted(set(our_params) | set(their_params), key=lambda m: order.get(m, 9)):
    a, b = our_params.get(m), their_params.get(m)
    same = "the same model size" if a == b else "DIFFERENT models: the comparison is not like for like"
    print(f"parameters, {m}: lockstep {a if a is None else f'{a:,}'}, PyTorch {b if b is None else f'{b:,}'}"
          + (f": {same}" if a and b else ""))
PY
