#!/usr/bin/env bash
# One device call's worth of GPU work, run on the GPU machine from the repository root with the bundle
# of scripts/gpu-check.sh unpacked: the parts named in PARTS, in order, each stopped at its own time
# limit so the whole ends well inside one call (the device tool allows 600 s a call), every log under
# OUT and one OUT/session.tar.gz of them all.
#   here:  bash scripts/gpu-check.sh                     (.gpu.tar.xz; carry it)
#   there: tar xJf .gpu.tar.xz && bash scripts/gpu-session.sh "$OUT"
# Parts (PARTS, comma-separated; default tests,head,lm,attention):
#   tests      the GPU test programs of TESTS (glob, default test_[kn]*_gpu: kernels and models), no
#              training comparisons (scripts/gpu_check/run.sh with ONLY=none)         limit 180 s
#   check      the CPU-vs-GPU training comparisons of ONLY (regex, default seed_cnn|gpt_mini.fp16)
#              and the test programs of CHECK_TESTS (default test_[pt][ar]*_gpu)     limit 240 s
#   lm         bench/gpu_lm.bench.sh, GPT-2 small (MODELS, default gpt2), PyTorch eager (TORCH_MODES)
#                                                                                   limit 200 s
#   head       bench/gpu_lm_head.bench.sh: GPT-2's output layer + loss, fused and composed  limit 60 s
#   attention  bench/gpu_attention.bench.sh                                          limit 100 s
#   zero       bench/zero_gpu.bench.sh (the big model first, then the stages; about 22 training
#              runs: give it a call of its own with LIMIT_ZERO=420, or WORLDS=1)     limit 240 s
#   gelu       GPT-2 small bf16 (bench_gpu_lm, graph and master modes) with LOCKSTEP_GELU_BACKWARD=kernel
#              (the default: a GEMM, then lockstep's GELU backward), then =epilogue (cuBLASLt's
#              DGELU_BGRAD): which is faster (never run yet; ~20 s a run)          limit 90 s
#   fusions    GPT-2 small bf16 (bench_gpu_lm, graph mode) with every fusion, then with each of
#              LOCKSTEP_DISABLE_FUSIONS's turned off (kernels/fusions.h): what each is worth, or
#              which one fails (never run yet; ~20 s a run)                         limit 150 s
#   valloss    bench/gpt_val_loss.bench.sh with DEVICE=cuda: gpt-mini's validation loss beside PyTorch's
#              after VALLOSS_STEPS steps (default 2000) on the same batches, PRECISION (default bf16),
#              the bundle's fortunes, PyTorch from lockstep's initial weights (INIT, default same);
#              lockstep, then PyTorch eager (estimate: under a minute each plus start-up and the
#              one-step run that writes the initial weights; never run yet)         limit 240 s
#   profile    bench/gpu_kernels.sh (Nsight Compute, one step, kernel families and their shares) for
#              each MODEL:DTYPE[:IMPL] of PROFILE (IMPL torch-eager, torch-compile or
#              torch-reduce-overhead: PyTorch's step of that case; default
#              resnet18_cifar:bf16,resnet18_cifar:bf16:torch-compile,gpt2:bf16; ~30-60 s each, a
#              compiled one more)                                                   limit 200 s
# LIMIT_<PART>=seconds changes a part's limit. Prints each part's summary as it ends.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:?usage: gpu-session.sh OUT}
bundle=${BUNDLE:-.gpu}
[ -d "$bundle/bin" ] || { echo "gpu-session: no bundle in $bundle (tar xJf .gpu.tar.xz first)" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
start=$(date +%s)

limit_of() {  # PART DEFAULT
  local var
  var="LIMIT_$(tr '[:lower:]' '[:upper:]' <<<"$1")"
  echo "${!var:-$2}"
}

# Each part runs in a session of its own, and at its limit, or when it ends, everything in that
# session is stopped: the programs its scripts start under their own `timeout` (which puts them in
# process groups of their own) do not run on into the next part.
stop_session() {  # SID SIGNAL
  pkill "-$2" -s "$1" 2>/dev/null || true
}
set +m     # no job control: a part started in the background is no group leader, so setsid needs no fork
part_pid=  # the running part's session, stopped if this script is
trap '[ -n "$part_pid" ] && stop_session "$part_pid" KILL' EXIT
trap 'exit 143' INT TERM
run_part() {  # PART DEFAULT_LIMIT COMMAND...
  local part=$1 limit
  limit=$(limit_of "$1" "$2")
  shift 2
  echo "== $part (limit ${limit} s; log $out/$part.log) at $(( $(date +%s) - start )) s"
  PART_LIMIT=$limit setsid "$@" >"$out/$part.log" 2>&1 &
  local pid=$! waited=0 rc
  part_pid=$pid
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "($part stopped at its ${limit} s limit)"
    stop_session "$pid" TERM
    sleep 5
    stop_session "$pid" KILL
  fi
  wait "$pid"
  rc=$?
  stop_session "$pid" KILL  # whatever the part left running
  part_pid=
  echo "($part exited $rc)" >>"$out/$part.log"
  tail -n 40 "$out/$part.log"
}

# STEPS is the lm part's (bench/gpu_lm.bench.sh); the other parts' scripts take their own defaults
# (run a bench script directly to give it STEPS).
lm_steps=${STEPS:-}
unset STEPS

IFS=, read -r -a parts <<<"${PARTS:-tests,head,lm,attention}"
for part in "${parts[@]}"; do
  case $part in
    tests) run_part tests 180 env ONLY=none TESTS="${TESTS:-test_[kn]*_gpu}" bash "$bundle/check/run.sh" "$out/tests" ;;
    check)
      run_part check 240 env ONLY="${ONLY:-seed_cnn|gpt_mini.fp16}" TESTS="${CHECK_TESTS:-test_[pt][ar]*_gpu}" \
        bash "$bundle/check/run.sh" "$out/check"
      ;;
    lm)
      run_part lm 200 env ${lm_steps:+STEPS=$lm_steps} OUT_DIR="$out/lm" MODELS="${MODELS:-gpt2}" TORCH_MODES="${TORCH_MODES:-eager}" \
        LOCKSTEP_MODES="${LOCKSTEP_MODES:-eager,master}" bash bench/gpu_lm.bench.sh "$bundle"
      ;;
    head) run_part head 60 env OUT_DIR="$out/head" bash bench/gpu_lm_head.bench.sh "$bundle" ;;
    gelu)
      # shellcheck disable=SC2016
      run_part gelu 90 bash -c 'source scripts/gpu-env.sh "$0" || exit 2
        for g in kernel epilogue; do
          echo "LOCKSTEP_GELU_BACKWARD=$g"
          LOCKSTEP_GELU_BACKWARD=$g timeout 40 "$0/bin/bench_gpu_lm" --models gpt2 --dtypes bf16 --modes graph,master --steps 20
        done' "$bundle"
      ;;
    profile)
      # shellcheck disable=SC2016
      run_part profile 200 bash -c 'for c in ${2//,/ }; do
          IFS=: read -r model dtype impl <<<"$c"
          echo "== $model $dtype ${impl:-lockstep}"
          IMPL=$impl bash bench/gpu_kernels.sh "$0" "$model" "$dtype" "$1" || echo "($c failed)"
        done' "$bundle" "$out/profile" "${PROFILE:-resnet18_cifar:bf16,resnet18_cifar:bf16:torch-compile,gpt2:bf16}"
      ;;
    fusions)
      # shellcheck disable=SC2016
      run_part fusions 150 bash -c 'source scripts/gpu-env.sh "$0" || exit 2
        for off in "" packed_qkv_attention residual_epilogue loss_with_grad; do
          echo "LOCKSTEP_DISABLE_FUSIONS=$off"
          LOCKSTEP_DISABLE_FUSIONS=$off timeout 40 "$0/bin/bench_gpu_lm" --models gpt2 --dtypes bf16 --modes graph --steps 20
        done' "$bundle"
      ;;
    attention) run_part attention 100 env OUT_DIR="$out/attention" bash bench/gpu_attention.bench.sh "$bundle" ;;
    zero) run_part zero 240 env OUT_DIR="$out/zero" bash bench/zero_gpu.bench.sh "$bundle" ;;
    valloss)
      run_part valloss 240 env DEVICE=cuda PRECISION="${PRECISION:-bf16}" INIT="${INIT:-same}" OUT_DIR="$out/valloss" \
        bash bench/gpt_val_loss.bench.sh "$bundle" "${VALLOSS_STEPS:-2000}" 200
      ;;
    *) echo "gpu-session: unknown part '$part' (known: tests, check, head, lm, gelu, fusions, attention, zero, valloss, profile)" >&2 ;;
  esac
done
echo "== done in $(( $(date +%s) - start )) s"
# Logs and summaries only: models, checkpoints and corpora stay behind (the device tool brings back
# files of up to 16 MiB).
tar czf "$out/session.tar.gz" -C "$out" --exclude=session.tar.gz --exclude='*.safetensors' \
  --exclude=checkpoints --exclude=corpus.txt --exclude='*.bin' . 2>/dev/null || true
ls -la "$out/session.tar.gz"
