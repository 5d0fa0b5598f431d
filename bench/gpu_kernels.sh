#!/usr/bin/env bash
# Where one training step's GPU time goes (issue 38's "no kernel family above 40% of a step unless
# it is a tensor-core GEMM/convolution"): Nsight Compute times every kernel of one eager step of
# bench_gpu_step, or bench_gpu_lm for the language models gpt-mini and gpt2 (after its warmup,
# between cudaProfilerStart/Stop: --profile-step) and the table
# sums them per kernel (templates and arguments dropped), with each one's share of the step and
# whether it runs on tensor cores. Run it where the GPU is, with the programs of
# scripts/gpu-check.sh or scripts/gpu-bundle.sh:
#   bash bench/gpu_kernels.sh .gpu resnet18_cifar bf16 [OUT_DIR]
#   bash bench/gpu_kernels.sh .gpu gpt2 bf16 [OUT_DIR]
#   IMPL=torch-compile bash bench/gpu_kernels.sh .gpu resnet18_cifar bf16 [OUT_DIR]
# IMPL=torch-eager|torch-compile|torch-reduce-overhead profiles PyTorch's step of the same case
# instead (bench/scripts/torch_gpu_step.py or torch_gpu_lm.py --profile-step, the machine's PyTorch),
# for the same table side by side with lockstep's.
# Prints the table (and writes it, with ncu's raw CSV, under OUT_DIR when given). About 30-60 s per
# case on an H100 (ncu replays nothing with this one metric, but serialises the step's kernels).
set -euo pipefail
bundle=${1:?usage: gpu_kernels.sh BUNDLE MODEL DTYPE [OUT_DIR]}
model=${2:?model: seed_cnn, resnet18_cifar, resnet50, gpt-mini or gpt2}
dtype=${3:?dtype: f32 or bf16}
out=${4:-$(mktemp -d)}
cd "$(dirname "$0")/.."
host_ld=${LD_LIBRARY_PATH-}
# shellcheck disable=SC1091
source scripts/gpu-env.sh "$bundle"
mkdir -p "$out"
impl=${IMPL:-lockstep}
tag=$model-$dtype${IMPL:+-$IMPL}
csv="$out/ncu-$tag.csv"
case "$impl" in
  lockstep)
    bench=bench_gpu_step
    case "$model" in gpt-mini | gpt2) bench=bench_gpu_lm ;; esac
    cmd=("$bench" --models "$model" --dtypes "$dtype" --modes eager --steps 20 --warmup 5 --profile-step)
    ;;
  torch-eager | torch-compile | torch-reduce-overhead)
    script=bench/scripts/torch_gpu_step.py
    case "$model" in gpt-mini | gpt2) script=bench/scripts/torch_gpu_lm.py ;; esac
    # PyTorch from the machine's own libraries, not the bundle's
    cmd=(env "LD_LIBRARY_PATH=$host_ld" python3 "$script" --models "$model" --dtypes "$dtype" --modes "${impl#torch-}"
      --steps 1 --warmup 5 --profile-step)
    ;;
  *) echo "gpu_kernels: IMPL=$impl: use lockstep (default), torch-eager, torch-compile or torch-reduce-overhead" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086
ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
  "${cmd[@]}" ${BENCH_FLAGS:-} >"$csv" 2>"$out/ncu-$tag.log" || {
  echo "gpu_kernels: ncu failed (log: $out/ncu-$tag.log)" >&2
  tail -5 "$out/ncu-$tag.log" >&2
  exit 1
}
LD_LIBRARY_PATH=$host_ld python3 - "$csv" "$model" "$dtype ($impl)" <<'PY' | tee "$out/kernels-$tag.md"
import csv, re, sys
from collections import defaultdict

path, model, dtype = sys.argv[1:4]
rows = [line for line in open(path) if line.startswith('"')]
total, per = 0.0, defaultdict(lambda: [0.0, 0, ""])
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "nsecond")
    ns = float(r["Metric Value"].replace(",", "")) * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6}.get(unit, 1)
    name = r["Kernel Name"]
    base = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", "").replace("<unnamed>::", ""))
    base = re.split(r"[<(]", base)[0].split("::")[-1]
    # Library kernels carry their configuration in the name (sm90_xmma_fprop_implicit_gemm_bf16...):
    # keep what says which kernel it is, drop the tile sizes.
    base = re.sub(r"_(tilesize|stage|warpsize|execute|kernel_).*$", "", base)
    base = re.sub(r"_\d+$", "", base)[:70]  # torch.compile's Triton kernels: triton_poi_fused_..._12
    tensor_core = bool(re.search(r"xmma|gmma|hmma|cutlass|wgmma|nvjet|_s1688|_s16816|tensorop", name, re.I)) and not re.search(
        r"ffma", name, re.I)
    e = per[base]
    e[0] += ns
    e[1] += 1
    e[2] = "tensor cores" if tensor_core else ""
    total += ns
if total == 0:
    sys.exit("gpu_kernels: no kernel times in the profile (was --profile-step honoured?)")
print(f"## One step: {model} {dtype}, {total / 1e3:.0f} us of kernels, {sum(v[1] for v in per.values())} launches\n")
print("| kernel | calls | us | share | |")
print("|---|---|---|---|---|")
for base, (ns, n, tc) in sorted(per.items(), key=lambda kv: -kv[1][0]):
    print(f"| {base} | {n} | {ns / 1e3:.0f} | {100 * ns / total:.1f}% | {tc} |")
top = max(per.items(), key=lambda kv: kv[1][0])
verdict = "ok" if top[1][0] / total <= 0.4 or top[1][2] else "OVER 40%"
print(f"\nlargest family: {top[0]} {100 * top[1][0] / total:.1f}% ({verdict})")
PY
