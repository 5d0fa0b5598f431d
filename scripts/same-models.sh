#!/usr/bin/env bash
# Refactoring check: the same training jobs, before and after a change, must write the same bytes.
#   scripts/same-models.sh run BUILD OUT       runs the jobs with BUILD/lockstep, writes OUT/models.txt
#   scripts/same-models.sh compare A B         compares two models.txt files; exits 1 when they differ
# Typical use: build the base commit in one folder and the change in another, `run` both, `compare`.
# models.txt lists, per job, the sha256 of every .safetensors file the job wrote (the final model,
# each checkpoint's model and optimizer state) and its summary's test_loss. The jobs are small CPU
# runs that together go through every trainer path: 1 and 2 ranks, DDP with comm hooks, ZeRO 1-3 with
# CPU and NVMe offload, bf16/fp16 autocast with loss scaling, gradient accumulation, clipping,
# schedules, BatchNorm (ResNet), GPT and Llama, checkpoint + resume, activation checkpointing.
# Runs pin LOCKSTEP_NUM_THREADS=1 and ONEDNN_MAX_CPU_ISA (AVX2) so a run is repeatable on one host.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
configs=$here/gpu_check/configs

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

corpus() {  # a byte corpus for the language models: the same text on every run
  python3 - "$1" <<'PY'
import random, sys
r = random.Random(7)
words = "the a gradient model rank step loss tensor shard all reduce epoch train lockstep data".split()
with open(sys.argv[1], "w") as f:
    for _ in range(1500):
        f.write(" ".join(r.choice(words) for _ in range(r.randint(4, 12))) + ".\n")
PY
}

# NAME|CONFIG|NPROC|--set overrides (space separated)
JOBS=(
  "cnn|seed_cnn|1|"
  "cnn_features|seed_cnn_features|1|checkpoint.every_steps=4"
  "cnn_ddp|seed_cnn|2|"
  "cnn_ddp_bf16_hook|seed_cnn|2|ddp.comm_hook=bf16_compress"
  "cnn_ddp_accumulate|seed_cnn_features|2|"
  "cnn_zero1|seed_cnn|2|zero_optimization.stage=1"
  "cnn_zero2|seed_cnn_features|2|zero_optimization.stage=2"
  "cnn_zero3|seed_cnn|2|zero_optimization.stage=3 checkpoint.every_steps=4"
  "cnn_zero3_offload_cpu|seed_cnn|2|zero_optimization.stage=3 zero_optimization.offload_optimizer.device=cpu zero_optimization.offload_param.device=cpu"
  "cnn_zero2_offload_nvme|seed_cnn|2|zero_optimization.stage=2 zero_optimization.offload_optimizer.device=nvme zero_optimization.offload_optimizer.nvme_path=@WORK@/nvme"
  "cnn_bf16|seed_cnn|1|bf16.enabled=true"
  "cnn_fp16|seed_cnn_features|1|fp16.enabled=true"
  "cnn_fp16_ddp|seed_cnn|2|fp16.enabled=true"
  "resnet18|resnet18|1|data.size=96 data.test_size=32 checkpoint.every_steps=2"
  "gpt|gpt_mini|1|data.root=@CORPUS@"
  "gpt_ddp_bf16|gpt_mini|2|data.root=@CORPUS@ bf16.enabled=true"
  "gpt_checkpointed|gpt_mini|1|data.root=@CORPUS@ activation_checkpointing.partition_activations=true"
  "llama|llama_tiny|1|data.root=@CORPUS@"
  "llama_zero3|llama_tiny|2|data.root=@CORPUS@ zero_optimization.stage=3"
)

run_jobs() {
  local build=$1 out=$2
  local bin
  bin=$(cd "$build" && pwd)/lockstep
  [[ -x $bin ]] || { echo "same-models: no lockstep binary at $bin (build first)" >&2; exit 2; }
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local work=$out/work
  rm -rf "$work" && mkdir -p "$work/nvme"
  corpus "$work/corpus.txt"
  : >"$out/models.txt"
  local job name cfg nproc sets
  for job in "${JOBS[@]}"; do
    IFS='|' read -r name cfg nproc sets <<<"$job"
    local dir=$work/runs/$name
    local args=("$configs/$cfg.yaml" --output-dir "$dir")
    local s
    for s in $sets; do
      s=${s//@CORPUS@/$work/corpus.txt}
      args+=(--set "${s//@WORK@/$work}")
    done
    ((nproc > 1)) && args+=(--nproc-per-node "$nproc")
    if ! LOCKSTEP_NUM_THREADS=1 ONEDNN_MAX_CPU_ISA=AVX2 "$bin" train "${args[@]}" >"$work/$name.log" 2>&1; then
      echo "same-models: job $name failed; its output:" >&2
      tail -n 20 "$work/$name.log" >&2
      exit 1
    fi
    if [[ $sets == *every_steps* ]]; then
      # resume from the first checkpoint: the resumed run must end where the uninterrupted one did
      local first
      first=$(cd "$dir/checkpoints" && ls -d ckpt-* | sort -t- -k2 -n | head -n 1)
      local rdir=$work/runs/$name.resumed
      if ! LOCKSTEP_NUM_THREADS=1 ONEDNN_MAX_CPU_ISA=AVX2 "$bin" train "${args[@]/$dir/$rdir}" \
        --resume-from "$dir/checkpoints/$first" >"$work/$name.resumed.log" 2>&1; then
        echo "same-models: job $name.resumed failed; its output:" >&2
        tail -n 20 "$work/$name.resumed.log" >&2
        exit 1
      fi
    fi
    echo "same-models: $name done" >&2
  done
  (cd "$work/runs" && find . -name '*.safetensors' -type f | LC_ALL=C sort | xargs sha256sum) >>"$out/models.txt"
  (cd "$work/runs" && for f in $(find . -name summary.json | LC_ALL=C sort); do
    echo "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("test_loss"))' "$f")  $f test_loss"
  done) >>"$out/models.txt"
  echo "same-models: $(wc -l <"$out/models.txt") lines in $out/models.txt" >&2
}

case ${1:-} in
  run) [[ $# -eq 3 ]] || usage; run_jobs "$2" "$3" ;;
  compare)
    [[ $# -eq 3 ]] || usage
    if diff -u "$2" "$3"; then
      echo "same-models: identical ($(wc -l <"$2") files and losses)"
    else
      echo "same-models: the runs differ (lines above)" >&2
      exit 1
    fi
    ;;
  *) usage ;;
esac
