#!/usr/bin/env bash
# Runs the libFuzzer targets built by `make fuzz` one after the other (docs/fuzzing.md).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET] [TARGET...]
# FUZZ_RUNS=N stops a target after N executions instead (whichever comes first).
# Each target starts from its seed corpus and kept regressions (read, never written) plus a
# working corpus in BUILD_DIR/fuzz-corpus/TARGET that grows across runs; a crash or leak is
# written to BUILD_DIR/fuzz-artifacts/TARGET/ and this script exits non-zero naming it: copy the
# file into tests/fuzz/regressions/TARGET/, fix the bug, and `make test` replays it from then on.
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR [SECONDS] [TARGET...]}
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(safetensors idx cifar cifar_python gzip tokens image config hostfile store); fi
runs=${FUZZ_RUNS:--1}
failed=()
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "run.sh: $bin is not built (make fuzz builds it)" >&2; exit 2; }
  mkdir -p "$build/fuzz-corpus/$t" "$build/fuzz-artifacts/$t" "$build/fuzz-logs"
  log="$build/fuzz-logs/$t.log"
  seeds=("$here/corpus/$t")
  [ -d "$here/regressions/$t" ] && seeds+=("$here/regressions/$t")
  echo "== fuzz_$t: ${seconds}s, runs ${runs}, log $log"
  "$bin" "$build/fuzz-corpus/$t" "${seeds[@]}" -max_total_time="$seconds" -runs="$runs" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t/" \
    >"$log" 2>&1
  rc=$?
  grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log"
  if [ $rc -ne 0 ]; then
    echo "fuzz_$t FOUND A PROBLEM (exit $rc); see $log and $build/fuzz-artifacts/$t/" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5 >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "run.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
