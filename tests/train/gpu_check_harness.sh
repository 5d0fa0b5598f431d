#!/usr/bin/env bash
# The GPU check's own logic, without a GPU (scripts/gpu_check: check.py's plan and summary,
# compare.py): real `lockstep train` runs on the CPU stand in for the GPU's, so that
#  1. every planned job is a valid shell script, and ONLY selects runs;
#  2. compare.py says bitwise for a run and its copy, and gives the relative difference of two
#     runs that differ (another seed);
#  3. the summary passes bitwise-equal runs and a CPU-vs-"GPU" difference under its bound (the
#     CPU's own kernels for another ISA), and fails, exiting 1, when a run that must repeat does not;
#  4. it sums a test program's gtest shards as gtests.py runs them (a real gtest program,
#     GTEST_PROGRAM: a few of the CPU's test_util tests in 2 shards), and fails the program when a
#     shard crashed;
#  5. gtests.py runs again alone each test that failed, crashed its shard or never ran, and tells
#     the one that fails alone from those it poisoned (FIXTURE: a gtest program whose one failing
#     test poisons its process, as a faulting kernel does); a shard that hangs is stopped and its
#     test named, and the tests after it still run; a caller's deadline stops what still runs.
#   gpu_check_harness.sh LOCKSTEP_BIN WORK_DIR GTEST_PROGRAM FIXTURE
set -euo pipefail

lockstep=$1 work=$2 gtest=$3 fixture=$4
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
GTEST_FILTER='Util.*:Suggest.*' TESTS_PER_SHARD=3 python3 "$check/gtests.py" "$work" "$gtest" ||
  fail "gtests.py on $gtest"
[ -f "$work/logs/test_util.shard1.rc" ] && [ ! -f "$work/logs/test_util.shard2.rc" ] ||
  fail "5 tests at 3 a shard are not 2 shards: $(ls "$work/logs")"
[ -s "$work/isolated/results.tsv" ] && fail "passing tests were run again: $(cat "$work/isolated/results.tsv")"
ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/shards.md" || true
grep -qF "| test_util | PASS | 5 passed, 0 failed, 0 skipped (2 shards) |" "$work/shards.md" ||
  fail "two shards of 5 passing tests: $(grep test_util "$work/shards.md")"
grep -qF "each run again alone" "$work/shards.md" && fail "a table of reruns without any: $(cat "$work/shards.md")"
echo 134 >"$work/logs/test_util.shard1.rc"  # a shard that crashed after writing its results
ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/shards.md" || true
grep -q "| test_util | FAIL | .* | exit 134: " "$work/shards.md" ||
  fail "a crashed shard: $(grep test_util "$work/shards.md")"

# 5. A poisoned process, one shard: Fixture.faults fails and poisons it, the next test fails, the one
#    after aborts, the last two never run. Alone, only Fixture.faults fails; it faults (a CUDA error),
#    so it runs again with blocking launches (no compute-sanitizer asked for here).
TESTS_PER_SHARD=100 SANITIZER=none python3 "$check/gtests.py" "$work" "$fixture" || fail "gtests.py on $fixture"
[ "$(cat "$work/logs/gpu_check_fixture.shard0.rc")" = 134 ] ||
  fail "the fixture's shard did not abort: exit $(cat "$work/logs/gpu_check_fixture.shard0.rc")"
rows=$work/isolated/results.tsv
expect() {  # TEST IN_SHARD ALONE [DETAIL]
  awk -F'\t' -v t="Fixture.$1" '$2 == t' "$rows" | grep -qP "^gpu_check_fixture\tFixture\.$1\t$2\t$3\t${4:-}" ||
    fail "Fixture.$1: want '$2 | $3 | ${4:-}', got: $(awk -F'\t' -v t="Fixture.$1" '$2 == t' "$rows")"
}
expect faults failed FAIL '.*CUDA error: an illegal memory access.*\(fixture\)\tno compute-sanitizer here; with CUDA_LAUNCH_BLOCKING=1: .*illegal memory access'
expect fails_once_poisoned failed PASS
expect aborts_once_poisoned 'crashed its shard \(exit 134\)' PASS
expect hangs_when_asked 'not run \(its shard ended before it\)' PASS
expect runs_last 'not run \(its shard ended before it\)' PASS
[ "$(grep -c . "$rows")" = 5 ] || fail "Fixture.passes was run again: $(cat "$rows")"
[ -f "$work/isolated/gpu_check_fixture.Fixture.faults.blocking.log" ] || fail "no blocking rerun: $(ls "$work/isolated")"
ONLY=$only python3 "$check/check.py" summarize "$check" "$work" >"$work/fixture.md" && fail "a failing fixture passed"
grep -qF "| gpu_check_fixture | FAIL |" "$work/fixture.md" || fail "$(cat "$work/fixture.md")"
grep -qF "| gpu_check_fixture | Fixture.fails_once_poisoned | failed | PASS |" \
  "$work/fixture.md" || fail "the reruns' table: $(cat "$work/fixture.md")"

# A hang: the shard is stopped after TEST_STALL s without output, its test named and not run again;
# the test after it runs alone.
hang=$work/hang
began=$(date +%s)
GPU_CHECK_FIXTURE_HANG=1 GTEST_FILTER='-Fixture.faults' TEST_STALL=3 SANITIZER=none \
  python3 "$check/gtests.py" "$hang" "$fixture" || fail "gtests.py on a hanging $fixture"
[ $(($(date +%s) - began)) -lt 60 ] || fail "a hung shard was not stopped within a minute"
rows=$hang/isolated/results.tsv
expect hangs_when_asked hung 'not run again'
expect runs_last 'not run \(its shard ended before it\)' PASS
[ "$(grep -c . "$rows")" = 2 ] || fail "a hang's reruns: $(cat "$rows")"
grep -q "shard stopped: no output for 3 s" "$hang/logs/gpu_check_fixture.shard0.log" ||
  fail "the hung shard's log does not say why it stopped: $(tail -3 "$hang/logs/gpu_check_fixture.shard0.log")"
# A caller's deadline: the shard still running is stopped there, nothing is run again, and the
# results are written.
late=$work/deadline
GPU_CHECK_FIXTURE_HANG=1 GTEST_FILTER='-Fixture.faults' TEST_STALL=100 DEADLINE=3 SANITIZER=none \
  python3 "$check/gtests.py" "$late" "$fixture" || fail "gtests.py with a deadline"
rows=$late/isolated/results.tsv
expect hangs_when_asked 'stopped at the deadline' 'not run again'
expect runs_last 'not run \(its shard ended before it\)' 'not run again \(past the deadline\)'
[ "$(cat "$late/logs/gpu_check_fixture.shard0.rc")" = 124 ] || fail "the stopped shard's exit: $(cat "$late/logs/"*.rc)"
echo "gpu_check_harness: ok"
