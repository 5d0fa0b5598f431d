#!/usr/bin/env bash
# lockstep against PyTorch on one GPU, same machine, same run (issue 20's targets, issue 38's
# columns): the seed CNN at batch 32 and 128, ResNet-50 at ImageNet's shape (224x224, batch 128)
# and the CIFAR ResNet-18 at batch 256, f32 and bf16 autocast, SGD and cross entropy on fixed random
# data (bench/gpu_step.cpp, bench/scripts/torch_gpu_step.py). Run it where the GPU is, with the
# programs packed by scripts/gpu-check.sh or scripts/gpu-bundle.sh (the lent GPU machine has PyTorch
# but not lockstep's libraries):
#   here:  bash scripts/gpu-bundle.sh .gpu build/bench/bench_gpu_step
#   there: bash bench/gpu.bench.sh .gpu            (OUT_DIR=$OUT/bench to keep the logs)
# lockstep runs eagerly and as a replayed CUDA graph (StepGraph), each twice: with its defaults
# (cuDNN's heuristic choice among deterministic algorithms: lockstep-eager, lockstep-graph) and
# opted in to PyTorch's usual setting (cudnn benchmark, nondeterministic algorithms allowed:
# lockstep-eager-optin, lockstep-graph-optin). PyTorch runs eager, torch.compile and
# torch.compile(mode="reduce-overhead") (CUDA graphs) with cudnn.benchmark on.
#
# Environment:
#   OUT_DIR   where the raw lines and logs go (default: a new mktemp -d); summary.md there too
#   MODELS    default seed_cnn,resnet50,resnet18_cifar (ResNet-50 before ResNet-18, so that the
#             PyTorch budget drops the CIFAR ResNet's compiled cases first)
#   STEPS     timed steps per seed CNN case (default 300; ResNet-18 STEPS/5, ResNet-50 STEPS/10,
#             at least 20)
#   TORCH_MODES      default eager,compile,reduce-overhead
#   TORCH_BUDGET_S   PyTorch starts no case after this many seconds (default 150)
#   LOCKSTEP_LIMIT_S, TORCH_LIMIT_S   hard limits per lockstep run and for PyTorch (150, 270 s)
#
# Time on an H100 with the defaults (estimates: this version was never run): lockstep about 1-2
# minutes per run, two runs (seed CNN ~10 s, ResNet-18 ~15 s, ResNet-50 ~40-80 s of 4 cases x 40
# steps, the opt-in run plus cuDNN's timing of ResNet-50's convolutions, ~10-30 s); PyTorch about 3-4
# minutes: importing it and every eager case ~40 s, each torch.compile of the seed CNN's step
# ~10-20 s (8 of them), of a ResNet's ~40-90 s. In all about 6 minutes, never over ~10 (the limits
# add up to 570 s); cases past PyTorch's budget print `skipped:`.
#
# Prints a header (GPU, driver, cuDNN, CUDA, PyTorch), both sides' lines, then the table: for every
# model, batch, dtype and lockstep impl, its samples/s and its ratio to each PyTorch mode's.
set -uo pipefail
bundle=${1:-.gpu}
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/scripts/gpu_bench.sh
source bench/scripts/gpu_bench.sh
gpu_bench_start "$bundle"
models=${MODELS:-seed_cnn,resnet50,resnet18_cifar}
steps=${STEPS:-300}

# NAME FLAGS...: one run of bench_gpu_step, its lines to NAME.txt (and the terminal), stderr to NAME.log.
lockstep_step_run() {
  local name=$1
  shift
  echo "== lockstep ($name): bench_gpu_step --models $models --steps $steps $*"
  lockstep_run "$name" "${LOCKSTEP_LIMIT_S:-150}" bench_gpu_step --models "$models" --steps "$steps" "$@"
}
lockstep_step_run lockstep
lockstep_step_run lockstep-optin --cudnn-benchmark --cudnn-nondeterministic

echo "== PyTorch: torch_gpu_step.py --models $models --steps $steps (stderr: $out/torch.log)"
torch_run torch "${TORCH_LIMIT_S:-270}" torch_gpu_step.py --models "$models" --steps "$steps" \
  --modes "${TORCH_MODES:-eager,compile,reduce-overhead}" --budget-s "${TORCH_BUDGET_S:-150}"

echo "== summary ($out/summary.md)"
LD_LIBRARY_PATH=$host_ld python3 - "$out" <<'PY' | tee "$out/summary.md"
import sys

sys.path.insert(0, "bench/scripts")
from gpu_summary import TORCH, read_lines

def read(name):
    """The version line's keys, and {(impl, model, batch, dtype): samples/s or why there is none}."""
    versions, lines = read_lines(sys.argv[1], name)
    rows = {(kv["impl"], kv["model"], kv["batch"], kv["dtype"]): float(kv["samples_per_s"]) if "samples_per_s" in kv
            else why for kv, why in lines}
    return versions, rows

lv, ours = read("lockstep.txt")
ov, optin = read("lockstep-optin.txt")
tv, theirs = read("torch.txt")
lv = lv or ov
ours.update(optin)
print(f"GPU: {lv.get('gpu') or tv.get('gpu', '?')} (sm_{lv.get('sm') or tv.get('sm', '?')}); "
      f"driver {lv.get('driver') or tv.get('driver', '?')} (CUDA {lv.get('driver_cuda', '?')})")
print(f"lockstep: cuDNN {lv.get('cudnn', '?')} (built with {lv.get('cudnn_built', '?')}), "
      f"CUDA runtime {lv.get('cuda_runtime', '?')}")
print(f"PyTorch {tv.get('torch', '?')}: cuDNN {tv.get('cudnn', '?')}, CUDA {tv.get('cuda', '?')}, "
      f"torchvision {tv.get('torchvision', '?')}")
print()
fmt = lambda v: f"{v:,.0f}" if isinstance(v, float) else v
order = {m: i for i, m in enumerate(["seed_cnn", "resnet18_cifar", "resnet50"])}
cases = sorted({k[1:] for k in list(ours) + list(theirs)}, key=lambda c: (order.get(c[0], 9), int(c[1]), c[2]))
print("| model | batch | dtype | torch eager | torch.compile | reduce-overhead |")
print("|---|---|---|---|---|---|")
for c in cases:
    print(f"| {' | '.join(c)} | " + " | ".join(fmt(theirs.get((m, *c), "-")) for m in TORCH) + " |")
print()
print("| model | batch | dtype | lockstep impl | samples/s | / torch eager | / torch.compile | / reduce-overhead |")
print("|---|---|---|---|---|---|---|---|")
impls = ["lockstep-eager", "lockstep-graph", "lockstep-eager-optin", "lockstep-graph-optin"]
impls += sorted({k[0] for k in ours} - set(impls))
for c in cases:
    for impl in impls:
        if (impl, *c) not in ours:
            continue
        v = ours[(impl, *c)]
        peers = [theirs.get((m, *c)) for m in TORCH]
        ratios = [f"{v / p:.2f}" if isinstance(v, float) and isinstance(p, float) else "-" for p in peers]
        print(f"| {' | '.join(c)} | {impl} | {fmt(v)} | " + " | ".join(ratios) + " |")
PY
