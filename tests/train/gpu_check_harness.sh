#!/usr/bin/env bash
# The GPU check's own logic, without a GPU (scripts/gpu_check: check.py's plan and summary,
# compare.py): real `lockstep train` runs on the CPU stand in for the GPU's, so that
#  1. every planned job is a valid shell script, and ONLY selects runs;
#  2. compare.py says bitwise for a run and its copy, and gives the relative difference of two
#     runs that differ (another seed);
#  3. the summary passes bitwise-equal runs and a CPU-vs-"GPU" difference under its bound (the
#     CPU's own kernels for another ISA), and fails, exiting 1, when a run that must repeat does not;
#  4. it sums a test program's gtest shards as run.sh runs them (a real gtest program, GTEST_PROGRAM:
#     a few of the CPU's test_util tests in 2 shards), and fails the program when a shard crashed.
#   gpu_check_harness.sh LOCKSTEP_BIN WORK_DIR GTEST_PROGRAM
set -euo pipefail

lockstep=$1 work=$2 gtest=$3
here=$(cd "$(dirname "$0")/../.." && pwd)
check=$here/scripts/gpu_check
fail() { echo "gpu_check_harness: FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/runs"

# 1. The plan.
python3 "$check/check.py" plan "$check" "$work" >"$work/jobs.txt"
[ "$(wc -l <"$work/jobs.txt")" -gt 50 ] || fail "check.py planned $(wc -l <"$work/jobs.txt") runs"
while read -r job; do bash -n "$job" || fail "$job is not a valid shell script"; done <"$work/jobs.txt"
grep -q 'ONEDNN_MAX_CPU_ISA=AVX2' "$work/jobs/seed_cnn.fp32.cpu_avx2.sh" || fail "no AVX2 run for the f32 bound"
ONLY='^llama_tiny\.' python3 "$check/check.py" plan "$check" "$work/only" >"$work/only.txt"
grep -qv 'llama_tiny' "$work/only.txt" && fail "ONLY=^llama_tiny. kept other runs: $(cat "$work/only.txt")"
rm -rf "$work/jobs" "$work/only" "$work/corpus.txt"

# 2. Runs: the seed CNN job on the CPU; the same again as the "GPU" run and its repeats; another ISA's
#    kernels (SSE4.1: another set on any x86 CPU) for the bound; another seed for a difference.
train() {
  local name=$1
  shift
  "$lockstep" train "$check/configs/seed_cnn.yaml" --output-dir "$work/runs/$name" --set max_steps=6 "$@" \
    >"$work/runs/$name.log" 2>&1 || fail "lockstep train ($name) failed: $(tail -3 "$work/runs/$name.log")"
  echo 0 >"$work/runs/$name.rc"
}
train seed_cnn.fp32.cpu
ONEDNN_MAX_CPU_ISA=SSE41 train seed_cnn.fp32.cpu_avx2
train seed_cnn.fp32.other_seed --set seed=2
for copy in gpu gpu_again graph; do
  cp -r "$work/runs/seed_cnn.fp32.cpu" "$work/runs/seed_cnn.fp32.$copy"
  echo 0 >"$work/runs/seed_cnn.fp32.$copy.rc"
done
a=$work/runs/seed_cnn.fp32.cpu/model.safetensors
same=$(python3 "$check/compare.py" "$a" "$work/runs/seed_cnn.fp32.gpu/model.safetensors")
[[ $same == *"rel=0.000e+00 bitwise=yes"* ]] || fail "a run and its copy: $same"
other=$(python3 "$check/compare.py" "$a" "$work/runs/seed_cnn.fp32.other_seed/model.safetensors")
[[ $other == *"bitwise=no"* && $other != *"rel=0.000e+00"* ]] || fail "runs of two seeds: $other"
# A run's parameters in bf16 (a master-weights run saves its 16-bit parameters) against the f32 run:
# compared as numbers, within bf16's rounding, never bitwise.
python3 - "$a" "$work/bf16.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
out_header, blobs, at = {}, [], 0
for name, info in header.items():
    if name == "__metadata__":
        out_header[name] = info
        continue
    lo, hi = info["data_offsets"]
    blob = data[lo:hi]
    if info["dtype"] == "F32":  # round to nearest even, as a cast to bf16 does
        words = struct.unpack(f"<{len(blob) // 4}I", blob)
        blob = struct.pack(f"<{len(words)}H", *[((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words])
        info = dict(info, dtype="BF16")
    out_header[name] = dict(info, data_offsets=[at, at + len(blob)])
    blobs.append(blob)
    at += len(blob)
head = json.dumps(out_header).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
PY
mixed=$(python3 "$check/compare.py" "$work/bf16.safetensors" "$a")
rel=$(sed -n 's/.*rel=\([^ ]*\).*/\1/p' <<<"$mixed")
[[ $mixed == *"bitwise=no"* ]] && python3 -c "import sys; sys.exit(not 0 < float('$rel') < 4e-3)" ||
  fail "a bf16 copy of a run against it: $mixed"

# 3. The summary of those runs' checks.
only='^seed_cnn\.fp32\.(cpu|cpu_avx2|gpu|gpu_again|graph)$'
ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/good.md" || fail "$(cat "$work/good.md")"
for line in "seed_cnn fp32 cpu-vs-gpu | PASS" "seed_cnn fp32 repeatable | PASS" "seed_cnn fp32 graph = eager | PASS" \
    "ALL PASSED"; do
  grep -qF "$line" "$work/good.md" || fail "summary lacks '$line': $(cat "$work/good.md")"
done
grep -q "vs avx2 kernels [1-9]" "$work/good.md" || fail "the f32 bound did not come from the second ISA's run"
rm -rf "$work/runs/seed_cnn.fp32.gpu_again"
cp -r "$work/runs/seed_cnn.fp32.other_seed" "$work/runs/seed_cnn.fp32.gpu_again"
if ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/bad.md"; then
  fail "a run that did not repeat passed: $(cat "$work/bad.md")"
fi
grep -qF "seed_cnn fp32 repeatable | FAIL | bitwise no" "$work/bad.md" || fail "$(cat "$work/bad.md")"
grep -qF "SOME CHECKS FAILED" "$work/bad.md" || fail "$(cat "$work/bad.md")"

# 4. A test program's shards, summed into one row.
mkdir -p "$work/logs" "$work/xml"
for k in 0 1; do
  (cd "$work" && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$k "$gtest" --gtest_filter='Util.*:Suggest.*' \
    --gtest_output="xml:$work/xml/test_util.shard$k.xml" >"$work/logs/test_util.shard$k.log" 2>&1
    echo $? >"$work/logs/test_util.shard$k.rc")
done
ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/shards.md" || true
grep -qF "| test_util | PASS | 5 passed, 0 failed, 0 skipped (2 shards) |" "$work/shards.md" ||
  fail "two shards of 5 passing tests: $(grep test_util "$work/shards.md")"
echo 134 >"$work/logs/test_util.shard1.rc"  # a shard that crashed after writing its results
ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/shards.md" || true
grep -q "| test_util | FAIL | .* | exit 134: " "$work/shards.md" ||
  fail "a crashed shard: $(grep test_util "$work/shards.md")"
echo "gpu_check_harness: ok"
