#!/usr/bin/env bash
# ZeRO on one GPU (issue 40): each stage's GPU memory per rank against DeepSpeed's formula, its
# samples/s against DDP's, and a model whose model states do not fit the GPU memory it may use
# trained with ZeRO-3 Offload. Run it where the GPU is, with the programs packed by
# scripts/gpu-check.sh (lockstep itself is all it needs):
#   here:  bash scripts/gpu-check.sh               (.gpu.tar.xz; carry it)
#   there: tar xJf .gpu.tar.xz && bash bench/zero_gpu.bench.sh .gpu    (OUT_DIR=$OUT/zero keeps the logs)
#
# Part 1, `lockstep train` of a GPT (MODEL, default gpt2: GPT-2 small's 12 x 768 blocks on bytes,
# vocabulary 256, ~85M parameters) at block 256, micro-batch 8 per rank, f32, Adam, STEPS steps
# (default 12), buckets of 2e7 elements (reduce_bucket_size = allgather_bucket_size), no CUDA graph,
# at world 1 and 2 (WORLDS; 2 ranks share the GPU through the host backend): DDP, stages 1, 2 and 3,
# ZeRO-Offload (stage 2, offload_optimizer cpu, pinned) and ZeRO-3 Offload (stage 3 with
# offload_optimizer and offload_param cpu, pinned). Per run: samples/s (summary.json, whole run),
# and per rank the GPU memory allocated between steps (the caching allocator's allocated bytes after
# the last step and validation: the model states on the GPU, with the loader's batches and library
# workspaces), the allocator's peaks and the peak host RSS. The formula is DeepSpeed's for the model
# states on the GPU with f32 Adam, Psi parameters, N ranks: DDP 16 Psi, stage 1 8 Psi + 8 Psi/N,
# stage 2 4 Psi + 12 Psi/N, stage 3 16 Psi/N, ZeRO-Offload 4 Psi (the parameters; gradients and
# states on the host), ZeRO-3 Offload 0 (only the layers in use). With BF16=1 (the default) also
# stages 1-3 and ZeRO-Offload in bf16 (bf16 parameters and gradients, f32 master weights in the
# partition, as DeepSpeed keeps them; rows *_bf16), against DeepSpeed's bf16 formula: stage 1
# 4 Psi + 12 Psi/N, stage 2 2 Psi + 14 Psi/N, stage 3 16 Psi/N, ZeRO-Offload 2 Psi; and stage 3 with
# bf16 master weights (bf16_master_weights_and_grads + bf16_optimizer_states: no f32 copy, bf16 Adam
# states; row zero3_bf16m), whose formula is 8 Psi/N.
#
# Part 2 (run first): BIG_MODEL (default gpt2-large, ~708M parameters: 11.3 GB of f32 Adam model
# states) under LOCKSTEP_CUDA_MEMORY_LIMIT=BIG_LIMIT (default 4GiB) for BIG_STEPS steps (default 4),
# micro-batch 2, each block checkpointed: ZeRO-3 Offload must train (its step time, GPU peaks and
# peak host RSS printed), and DDP must fail with the allocator's out-of-memory error naming the limit.
# Runs generate no sample, and their models and checkpoints are deleted as each ends (the summary
# reads summary.json and the log).
#
# DeepSpeed is not installed on the lent GPU machines (no package registry there), so no peer runs
# here; the CPU comparison with DeepSpeed is bench/zero.bench.sh.
set -uo pipefail
bundle=${1:-.gpu}
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/scripts/gpu_bench.sh
source bench/scripts/gpu_bench.sh
gpu_bench_start "$bundle"
model=${MODEL:-gpt2}
steps=${STEPS:-12}
worlds=${WORLDS:-1 2}
big_model=${BIG_MODEL:-gpt2-large}
big_limit=${BIG_LIMIT:-4GiB}
big_steps=${BIG_STEPS:-4}
limit_s=${RUN_LIMIT_S:-150}
bf16=${BF16:-1}

corpus="$out/corpus.txt"
LD_LIBRARY_PATH=$host_ld python3 -c "
import random
random.seed(1)
words = [''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2, 9))) for _ in range(5000)]
with open('$corpus', 'w') as f:
    f.write(' '.join(random.choice(words) for _ in range(800000)))
"
cfg="$out/gpt.yaml"
cat >"$cfg" <<EOF
model: {name: gpt, model_type: $model, block_size: 256, dropout: 0}
data: {dataset: text, root: $corpus, val_split: 0.002}
train_micro_batch_size_per_gpu: 8
optimizer: {type: Adam, params: {lr: 1.0e-4}}
zero_optimization: {reduce_bucket_size: 20000000, allgather_bucket_size: 20000000}
device: cuda
cuda_graph: false
max_steps: $steps
sample: {max_new_tokens: 0}
steps_per_print: 1000
seed: 1
EOF

# NAME WORLD SETS...: one `lockstep train` run, its output in $out/runs/NAME.
train_run() {
  local name=$1 world=$2
  shift 2
  local sets=() s
  for s in "$@"; do sets+=(--set "$s"); done
  local nproc=()
  [ "$world" -gt 1 ] && nproc=(--nproc-per-node "$world")
  echo "== $name (world $world): $*"
  timeout "$limit_s" lockstep train "$cfg" --output-dir "$out/runs/$name" "${sets[@]}" "${nproc[@]}" \
    >"$out/runs/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || { echo "   exited with status $rc$(limit_note "$rc"); last lines:"; tail -n 4 "$out/runs/$name.log"; }
  # The summary reads summary.json and the log; the model and checkpoints (GBs for the big model)
  # would only fill the disk and the session's results.
  rm -rf "$out/runs/$name/checkpoints" "$out/runs/$name/model.safetensors"
  return 0
}
mkdir -p "$out/runs"
offload=(zero_optimization.offload_optimizer.device=cpu zero_optimization.offload_optimizer.pin_memory=true)
param=(zero_optimization.offload_param.device=cpu zero_optimization.offload_param.pin_memory=true)
# The big model first: its result is the part's headline, and a cut at the part's limit then takes
# the stage runs instead. Micro-batch 2 with each block checkpointed and no layer kept whole between
# forward and backward (stage3_max_reuse_distance 0), so that its activations fit the limit too.
big=("model.model_type=$big_model" "max_steps=$big_steps" "train_micro_batch_size_per_gpu=2"
  "model.checkpoint_every=1" "zero_optimization.stage3_max_reuse_distance=0")
LOCKSTEP_CUDA_MEMORY_LIMIT=$big_limit train_run big.zero3_offload 1 "${big[@]}" zero_optimization.stage=3 \
  "${offload[@]}" "${param[@]}"
LOCKSTEP_CUDA_MEMORY_LIMIT=$big_limit train_run big.ddp 1 "${big[@]}" zero_optimization.stage=0
for w in $worlds; do
  train_run "ddp.w$w" "$w" zero_optimization.stage=0
  for s in 1 2 3; do train_run "zero$s.w$w" "$w" "zero_optimization.stage=$s"; done
  train_run "zero2_offload.w$w" "$w" zero_optimization.stage=2 "${offload[@]}"
  train_run "zero3_offload.w$w" "$w" zero_optimization.stage=3 "${offload[@]}" "${param[@]}"
  if [ "$bf16" = 1 ]; then
    for s in 1 2 3; do train_run "zero${s}_bf16.w$w" "$w" "zero_optimization.stage=$s" bf16.enabled=true; done
    train_run "zero2_offload_bf16.w$w" "$w" zero_optimization.stage=2 "${offload[@]}" bf16.enabled=true
    train_run "zero3_bf16m.w$w" "$w" zero_optimization.stage=3 bf16.enabled=true \
      bf16.bf16_master_weights_and_grads=true bf16.bf16_optimizer_states=true
  fi
done
echo "== summary ($out/summary.md)"
LD_LIBRARY_PATH=$host_ld python3 - "$out" "$big_limit" <<'PY' | tee "$out/summary.md"
import json, os, re, sys
out, big_limit = sys.argv[1], sys.argv[2]
GB = 1e9

def load(name):
    d = os.path.join(out, "runs", name)
    log = open(os.path.join(out, "runs", name + ".log"), errors="replace").read() if os.path.exists(
        os.path.join(out, "runs", name + ".log")) else ""
    m = re.search(r"model: .*?, (\d+) parameters", log)
    psi = int(m.group(1)) if m else None
    try:
        s = json.load(open(os.path.join(d, "summary.json")))
    except (OSError, ValueError):
        s = None
    return s, psi, log

def formula(kind, psi, n):
    return {"ddp": 16 * psi, "zero1": 8 * psi + 8 * psi / n, "zero2": 4 * psi + 12 * psi / n,
            "zero3": 16 * psi / n, "zero2_offload": 4 * psi, "zero3_offload": 0,
            "zero1_bf16": 4 * psi + 12 * psi / n, "zero2_bf16": 2 * psi + 14 * psi / n,
            "zero3_bf16": 16 * psi / n, "zero2_offload_bf16": 2 * psi, "zero3_bf16m": 8 * psi / n}[kind]

print("| run | world | Psi | samples/s | vs DDP | GPU between steps (max rank) | DeepSpeed formula | ratio | "
      "GPU allocated peak | GPU reserved peak | host peak RSS | host offload (report) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for w in sorted({int(f.split(".w")[1].split(".")[0]) for f in os.listdir(os.path.join(out, "runs"))
                 if ".w" in f and f.endswith(".log")}):
    ddp, _, _ = load(f"ddp.w{w}")
    for kind in ("ddp", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload", "zero1_bf16", "zero2_bf16",
                 "zero3_bf16", "zero2_offload_bf16", "zero3_bf16m"):
        s, psi, _ = load(f"{kind}.w{w}")
        if "_bf16" in kind and not os.path.exists(os.path.join(out, "runs", f"{kind}.w{w}.log")):
            continue
        if s is None or psi is None:
            print(f"| {kind} | {w} | | failed (see runs/{kind}.w{w}.log) | | | | | | | | |")
            continue
        mem = s["memory"]
        between = max(m.get("gpu_allocated_between_steps_bytes", -1) for m in mem)
        peak = max(m.get("gpu_allocated_peak_bytes", -1) for m in mem)
        reserved = max(m.get("gpu_reserved_peak_bytes", -1) for m in mem)
        rss = max(m.get("peak_rss_bytes", -1) for m in mem)
        host = max(m.get("host_offload", 0) for m in mem)
        f = formula(kind, psi, w)
        ratio = f"{between / f:.3f}" if f > 0 else "n/a"
        vs = f"{s['samples_per_second'] / ddp['samples_per_second']:.2f}x" if ddp else ""
        print(f"| {kind} | {w} | {psi / 1e6:.1f}M | {s['samples_per_second']:.1f} | {vs} | {between / GB:.3f} GB | "
              f"{f / GB:.3f} GB | {ratio} | {peak / GB:.3f} GB | {reserved / GB:.3f} GB | {rss / GB:.2f} GB | "
              f"{host / GB:.3f} GB |")
print()
s, psi, log = load("big.zero3_offload")
if s is None or psi is None:
    print(f"big model, ZeRO-3 Offload under LOCKSTEP_CUDA_MEMORY_LIMIT={big_limit}: FAILED (runs/big.zero3_offload.log)")
else:
    mem = s["memory"][0]
    step_s = s["global_batch_size"] / s["samples_per_second"] if s["samples_per_second"] else float("nan")
    print(f"big model ({psi / 1e6:.0f}M parameters, f32 Adam model states {16 * psi / GB:.1f} GB) with ZeRO-3 "
          f"Offload under LOCKSTEP_CUDA_MEMORY_LIMIT={big_limit}: trained {s['steps']} steps, "
          f"{step_s:.2f} s/step (whole run), GPU allocated peak {mem.get('gpu_allocated_peak_bytes', -1) / GB:.2f} GB, "
          f"reserved peak {mem.get('gpu_reserved_peak_bytes', -1) / GB:.2f} GB, between steps "
          f"{mem.get('gpu_allocated_between_steps_bytes', -1) / GB:.3f} GB, host peak RSS "
          f"{mem['peak_rss_bytes'] / GB:.2f} GB, host offload {mem['host_offload'] / GB:.2f} GB")
_, _, log = load("big.ddp")
oom = re.search(r"CUDA out of memory[^\n]*", log)
print(f"big model, DDP under the same limit: {'out of memory as expected: ' + oom.group(0)[:200] if oom else 'NO out-of-memory error (see runs/big.ddp.log)'}")
PY
