#!/usr/bin/env bash
# Attention alone on one GPU, lockstep beside PyTorch's SDPA in the same run (issue 39's target:
# forward + backward at T = 1024, 12 heads of 64, bf16, within 1.3x of cuDNN's or PyTorch's flash
# SDPA, memory linear in T). lockstep's op runs as autograd::scaledDotProductAttention chooses
# (lockstep-auto: cuDNN's fused SDPA for bf16 without dropout, its deterministic backward, lockstep's
# default, in chunks of keys past a bound so that its scratch grows linearly in T; lockstep-auto-chunk512:
# the B 16 case in chunks of 512 keys, what chunking costs; lockstep-auto-nondet: the same with
# --cudnn-nondeterministic, PyTorch's default dQ-atomics backward) and with its own tiled kernel
# (lockstep-own: LOCKSTEP_GPU_ATTENTION=lockstep); PyTorch with each SDPA backend (flash, cudnn,
# efficient). Causal, batch 16 (GPT-2 small's 16 x 1024) for the time; then batch 2 at T = 1024 to
# 8192 for the peak memory of a step. Run it where the GPU is, with bench_attention packed:
#   here:  bash scripts/gpu-check.sh          (the bundle carries bench_attention)
#   there: bash bench/gpu_attention.bench.sh .gpu       (OUT_DIR=$OUT/attention to keep the logs)
# About a minute on an H100 (PyTorch's import ~15 s; every case a few hundred ms).
set -uo pipefail
bundle=${1:-.gpu}
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/scripts/gpu_bench.sh
source bench/scripts/gpu_bench.sh
gpu_bench_start "$bundle"
steps=${STEPS:-20}
seqs=${SEQS:-1024,2048,4096,8192}

{
  for impl in auto auto-nondet own; do
    env_arg=() flags=()
    [ "$impl" = own ] && env_arg=(env LOCKSTEP_GPU_ATTENTION=lockstep)
    [ "$impl" = auto-nondet ] && flags=(--cudnn-nondeterministic)
    "${env_arg[@]}" bench_attention --device cuda --dtype bf16 --batch 16 --heads 12 --dim 64 --seq 1024 \
      --causal --steps "$steps" "${flags[@]}" | sed "s/^impl=fused/impl=lockstep-$impl/"
    # what chunking the deterministic backward's keys costs where one call fits (GPT-2's shape)
    if [ "$impl" = auto ]; then
      bench_attention --device cuda --dtype bf16 --batch 16 --heads 12 --dim 64 --seq 1024 --causal \
        --steps "$steps" --key-chunk 512 | sed "s/^impl=fused/impl=lockstep-auto-chunk512/"
    fi
    for t in ${seqs//,/ }; do
      "${env_arg[@]}" bench_attention --device cuda --dtype bf16 --batch 2 --heads 12 --dim 64 --seq "$t" \
        --causal --steps 5 "${flags[@]}" | sed "s/^impl=fused/impl=lockstep-$impl/"
    done
  done
} >"$out/lockstep.txt" 2>"$out/lockstep.log"
cat "$out/lockstep.txt"
tail -n 5 "$out/lockstep.log"

torch_run torch 240 torch_attention.py --batch 16 --heads 12 --dim 64 --seqs 1024 --dtype bf16 --causal \
  --steps "$steps"
torch_run torch_memory 240 torch_attention.py --batch 2 --heads 12 --dim 64 --seqs "$seqs" --dtype bf16 \
  --causal --steps 5

echo "== summary ($out/summary.md)"
LD_LIBRARY_PATH=$host_ld python3 - "$out" <<'PY' | tee "$out/summary.md"
import sys

def rows(name):
    out = []
    for line in open(f"{sys.argv[1]}/{name}.txt"):
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        if "fwd_bwd_ms" in kv:
            out.append(kv)
    return out

ours = rows("lockstep")
theirs = rows("torch") + rows("torch_memory")
def at(rs, b, t):
    return {r["impl"]: r for r in rs if r["B"] == b and r["T"] == t}
time_ours, time_theirs = at(ours, "16", "1024"), at(theirs, "16", "1024")
print("forward + backward, B 16, 12 heads of 64, T 1024, causal, bf16 (ms)")
print()
print("| impl | ms | / torch-flash | / torch-cudnn |")
print("|---|---|---|---|")
for impl, r in list(time_ours.items()) + list(time_theirs.items()):
    ms = float(r["fwd_bwd_ms"])
    ratio = [f"{ms / float(time_theirs[p]['fwd_bwd_ms']):.2f}" if p in time_theirs else "-"
             for p in ("torch-flash", "torch-cudnn")]
    print(f"| {impl} | {ms:.3f} | " + " | ".join(ratio) + " |")
print()
print("peak memory of a step, B 2, MiB (linear in T: doubling T doubles it)")
print()
seqs = sorted({int(r["T"]) for r in ours + theirs if r["B"] == "2"})
impls = sorted({r["impl"] for r in ours + theirs if r["B"] == "2"})
print("| impl | " + " | ".join(f"T {t}" for t in seqs) + " |")
print("|---|" + "---|" * len(seqs))
for impl in impls:
    cells = []
    for t in seqs:
        r = [x for x in ours + theirs if x["impl"] == impl and x["B"] == "2" and x["T"] == str(t)]
        cells.append(f"{int(r[0]['peak_bytes']) / 2**20:.1f}" if r else "-")
    print(f"| {impl} | " + " | ".join(cells) + " |")
PY
