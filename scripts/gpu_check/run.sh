#!/usr/bin/env bash
# The GPU check, run on a GPU machine from a bundle made by scripts/gpu-check.sh (docs/gpu.md):
#   tar xJf .gpu.tar.xz && bash .gpu/check/run.sh OUT
# Runs every GPU test program of the bundle and the CPU-vs-GPU training comparisons of check.py
# (each `lockstep train` run on the CPU and on the GPU, model.safetensors compared by compare.py),
# at once where they can share the machine, and writes OUT/summary.md (one line per check, PASS or
# FAIL with the figure and its bound) and OUT/logs.tar.gz (every log and run directory's text
# files). ONLY=REGEX keeps some runs (check.py), TESTS=GLOB some test programs (TESTS=none: none).
# Exits 0 only when every check passed. Needs: an NVIDIA GPU, python3
# (PyTorch's wheels, where present, supply cuDNN, NCCL and cuBLAS: see env.sh).
set -uo pipefail
check=$(cd "$(dirname "$0")" && pwd)
bundle=$(dirname "$check")
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
work=$(mktemp -d /tmp/lockstep-gpu-check.XXXXXX)
mkdir -p "$work/logs" "$work/xml" "$work/runs"
# The logs come back however the check ends: at its end, or stopped at a caller's time limit.
pack_logs() {
  (cd "$work" && find . -name '*.log' -o -name '*.rc' -o -name '*.xml' -o -name '*.json' -o -name '*.csv' \
    -o -name '*.yaml' -o -name 'compare.txt' | tar czf "$out/logs.tar.gz" -T -)
}
trap pack_logs EXIT
trap 'exit 143' INT TERM
# shellcheck disable=SC1091
source "$check/env.sh" "$bundle"
# The test programs run `lockstep` from the path they were built with (LOCKSTEP_BIN).
lockstep_bin=$(cat "$check/lockstep_bin")
if [ ! -x "$lockstep_bin" ]; then
  mkdir -p "$(dirname "$lockstep_bin")" && ln -sf "$bundle/bin/lockstep" "$lockstep_bin"
fi
jobs=$(nproc)

{
  echo "# lockstep GPU check"
  echo
  echo "- date: $(date -u +%FT%TZ); bundle: $(cat "$check/version")"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  echo "- host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  echo
} >"$out/summary.md"

# 1. Every GPU test program in the background (they use the GPU a little at a time), a long one cut
#    into gtest shards that run at once (gtests.py: TESTS_PER_SHARD tests a shard, default 15, at most
#    4; test_kernels_gpu's host-side oracles were its long pole); then each test that failed, crashed
#    its shard or never ran because of it, alone, and those that fault alone under compute-sanitizer.
#    Shard k of NAME writes logs/NAME.shard<k>.{log,rc} and xml/NAME.shard<k>.xml, the reruns
#    isolated/ (results.tsv): check.py sums and prints them.
# Under a caller's time limit (gpu-session.sh's PART_LIMIT) the reruns stop starting 30 s before it.
if [ -z "${DEADLINE:-}" ] && [ "${PART_LIMIT:-0}" -gt 60 ]; then export DEADLINE=$((PART_LIMIT - 30)); fi
# shellcheck disable=SC2086
python3 "$check/gtests.py" "$work" "$bundle"/bin/${TESTS:-test_*_gpu} &
gtests_pid=$!

# 2. The training runs the comparisons need: one `lockstep train` per line check.py plans, several
#    at a time; run NAME writes runs/NAME/, runs/NAME.log and runs/NAME.rc.
python3 "$check/check.py" plan "$check" "$work" >"$work/jobs.txt" ||
  { echo "check.py plan failed" | tee -a "$out/summary.md"; exit 1; }
export LOCKSTEP_BIN_PATH="$bundle/bin/lockstep"
grep -v '/bad\.oom\.sh$' "$work/jobs.txt" | xargs -d '\n' -n 1 -P "$(( jobs > 8 ? 8 : jobs ))" bash
wait "$gtests_pid"
# The out-of-memory run alone: it fills the GPU.
if grep -q '/bad\.oom\.sh$' "$work/jobs.txt"; then bash "$work/jobs/bad.oom.sh"; fi

# 3. The summary.
python3 "$check/check.py" summarize "$check" "$work" >>"$out/summary.md"
rc=$?
echo >>"$out/summary.md"
echo "check took $(( $(date +%s) - start )) s" >>"$out/summary.md"
cat "$out/summary.md"
exit $rc
