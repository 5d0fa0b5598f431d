#!/usr/bin/env bash
# Pipeline parallelism beside PyTorch (issue 42): gpt-mini (block 64) split in STAGES stages, one
# rank per core (taskset), MICRO_BATCHES micro-batches of 4 sequences per step, AdamW, fixed random
# tokens. lockstep's bench/pipeline.cpp (its stages' sends and receives over the backend
# `lockstep train` takes, auto: shm on one host; BACKEND=gloo for PyTorch's) against
# torch.distributed.pipelining (bench/scripts/torch_pipeline.py over gloo, PyPI's current torch,
# its best of with and without the glibc malloc tunables), for 1F1B and GPipe, in one run;
# lockstep's measured bubble per stage beside the bubble its stages' measured forward and backward
# times leave when transfers take no time (the schedule played out by simulatePipeline: the part of
# the bubble that is the cut's imbalance, not the runtime's) and the schedule's theoretical
# (S - 1) / (V M + S - 1) for equal stages; interleaved 1F1B with V = VIRTUAL_STAGES chunks
# per stage (3 by default: gpt-mini's 6 blocks one per part on 2 stages) against torch's
# ScheduleInterleaved1F1B on the same cut. The 1F1B row also runs DeepSpeed's PipelineModule
# (bench/scripts/deepspeed_pipeline.py: its pipeline engine's TrainSchedule, the tied head a
# TiedLayerSpec, partition_method type:Block, which is the default cut; CPU accelerator, gloo; its
# best of with and without the tunables); DeepSpeed has no GPipe or interleaved training schedule, and
# with BOUNDARIES it is left out (PipelineModule takes no explicit cut).
#   bash bench/pipeline.bench.sh [BUILD_DIR] [STEPS]
#     (STAGES=2 MICRO_BATCHES=8 VIRTUAL_STAGES=3 MODEL=gpt-mini; gpt-nano, gpt-micro: smaller blocks;
#      VIRTUAL_STAGES=1 leaves interleaved 1F1B out, as gpt-nano's 3 blocks need; BOUNDARIES="0 3 5"
#      cuts both sides there instead of halving the blocks)
set -euo pipefail
build=${1:-build}
steps=${2:-10}
stages=${STAGES:-2}
micro_batches=${MICRO_BATCHES:-8}
virtual_stages=${VIRTUAL_STAGES:-3}
model=${MODEL:-gpt-mini}
backend=${BACKEND:-auto}
boundaries=${BOUNDARIES:-}  # e.g. "0 3 5": gpt-nano's embedding and 2 blocks, then a block and the head
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
port=$((29600 + RANDOM % 90))
# shellcheck source=bench/scripts/peer.sh
source "$here/scripts/peer.sh"
peer_python "$build" pipeline.bench deepspeed
[ -x "$build/bench/bench_pipeline" ] || { echo "pipeline.bench: build bench_pipeline first (make build)" >&2; exit 2; }
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p')), $(nproc --all) cores; torch $("$python" -c 'import torch; print(torch.__version__)'), deepspeed $("$python" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -n 1 || echo '(does not import)')"
echo "$model, block 64, $stages stages${boundaries:+ (boundaries $boundaries)}, $micro_batches micro-batches of 4, $steps timed steps after 3; lockstep's backend $backend, PyTorch's and DeepSpeed's gloo"
echo
echo "| schedule | lockstep samples/s | lockstep idle per stage (for the stages' measured costs with free transfers; theoretical, equal stages) | PyTorch samples/s (tunables) | lockstep / PyTorch | DeepSpeed samples/s (tunables) | lockstep / DeepSpeed |"
echo "|---|---|---|---|---|---|---|"
schedules=(1f1b gpipe)
[ "$virtual_stages" -ge 2 ] && schedules+=(interleaved_1f1b)  # VIRTUAL_STAGES=1: without it
for schedule in "${schedules[@]}"; do
  args=(--model-type "$model" --schedule "$schedule" --steps "$steps" --warmup 3 --micro-batches "$micro_batches")
  ours_args=(--backend "$backend")
  [ "$schedule" = interleaved_1f1b ] && args+=(--virtual-stages "$virtual_stages")
  # shellcheck disable=SC2206
  [ -n "$boundaries" ] && [ "$schedule" != interleaved_1f1b ] && args+=(--boundaries $boundaries)
  ours=$(run_ranks "$stages" "$build/bench/bench_pipeline" "${args[@]}" "${ours_args[@]}")
  ours_rate=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' <<<"$ours")
  idle=$(sed -n 's/^stage=\([0-9]*\) idle=\([0-9.]*\) theoretical=\([0-9.]*\).*/\2/p' <<<"$ours" | paste -sd/ -)
  theory=$(sed -n 's/.*theoretical=\([0-9.]*\).*/\1/p' <<<"$ours" | head -n 1)
  ideal=$(sed -n 's/.*ideal_for_these_costs=\([0-9.]*\).*/\1/p' <<<"$ours" | paste -sd/ -)
  read -r theirs tuned < <(peer_best samples_per_s "$stages" "$python" "$here/scripts/torch_pipeline.py" "${args[@]}")
  ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}x')" "${ours_rate:-0}" "${theirs:-0}" 2>/dev/null || echo "-")
  ds="- | -"
  if [ "$schedule" = 1f1b ] && [ -z "$boundaries" ]; then
    read -r ds_rate ds_tuned < <(peer_best samples_per_s "$stages" "$python" "$here/scripts/deepspeed_pipeline.py" \
      --model-type "$model" --steps "$steps" --warmup 3 --micro-batches "$micro_batches")
    ds_ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}x')" "${ours_rate:-0}" "${ds_rate:-0}" 2>/dev/null || echo "-")
    ds="$ds_rate ($ds_tuned) | $ds_ratio"
  fi
  label=$schedule
  [ "$schedule" = interleaved_1f1b ] && label="$schedule ($virtual_stages chunks per stage)"
  echo "| $label | ${ours_rate:-failed} | $idle ($ideal; $theory) | $theirs ($tuned) | $ratio | $ds |"
done
