#!/usr/bin/env bash
# Builds the GPU check's bundle here (a machine with the CUDA toolkit, no GPU needed): every GPU test
# program, `lockstep`, the GPU benches (bench_gpu_step, bench_gpu_lm, bench_attention, bench_lm_head),
# bench_train_order and a copy of the fortunes corpus (OUT/data/fortunes, ~2.5 MB, 0.8 MB packed; for
# bench/gpt_val_loss.bench.sh: the GPU machine has no /usr/share/games/fortunes), and the check itself
# (scripts/gpu_check/: run.sh, check.py, compare.py, the training configs), packed into OUT.tar.xz
# for a GPU machine (docs/gpu.md):
#   here:  bash scripts/gpu-check.sh [BUILD] [OUT]          (defaults: build .gpu)
#   there: tar xJf .gpu.tar.xz && bash .gpu/check/run.sh RESULTS
# RESULTS/summary.md then says PASS or FAIL for every GPU test program and every CPU-vs-GPU training
# comparison, and RESULTS/logs.tar.gz holds the logs. The archive must stay under the device tool's
# 64 MiB (it carries the working tree too); this script fails if it is larger than LIMIT_MB (56).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-.gpu}
[ -f "$build/build.ninja" ] || { echo "gpu-check: no build in $build (run: make build)" >&2; exit 2; }
mapfile -t tests < <(ninja -C "$build" -t targets all | sed -n 's/^\(tests\/test_[a-z_]*_gpu\): .*/\1/p' | sort -u)
[ ${#tests[@]} -gt 0 ] || { echo "gpu-check: $build has no GPU test programs (built without CUDA?)" >&2; exit 2; }
cmake --build "$build" --target lockstep bench_gpu_step bench_gpu_lm bench_attention bench_lm_head bench_train_order \
  "${tests[@]##*/}" -j "$(nproc)"
rm -rf "$out" "$out.tar.gz" "$out.tar.xz"
mkdir -p "$out/check"
cp scripts/gpu_check/run.sh scripts/gpu_check/check.py scripts/gpu_check/compare.py scripts/gpu_check/gtests.py "$out/check/"
cp -r scripts/gpu_check/configs "$out/check/"
cp scripts/gpu-env.sh "$out/check/env.sh"
realpath "$build/lockstep" >"$out/check/lockstep_bin"  # what the test programs were built to run
echo "$(git describe --always --dirty) built $(date -u +%FT%TZ)" >"$out/check/version"
# The corpus gpt_fortunes.yaml trains on, as both sides read it: the regular files, less the .dat indexes
# and the .u8 links.
fortunes=/usr/share/games/fortunes
if [ -d "$fortunes" ]; then
  mkdir -p "$out/data/fortunes"
  find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$out/data/fortunes/" \;
else
  echo "gpu-check: no $fortunes here (apt-get install fortunes): the bundle has no corpus for" \
    "bench/gpt_val_loss.bench.sh" >&2
fi
progs=("$build/lockstep" "$build/bench/bench_gpu_step" "$build/bench/bench_gpu_lm" "$build/bench/bench_attention"
  "$build/bench/bench_lm_head" "$build/bench/bench_train_order")
for t in "${tests[@]}"; do progs+=("$build/$t"); done
STRIP=1 bash scripts/gpu-bundle.sh "$out" "${progs[@]}"
size_mb=$(( $(stat -c %s "$out.tar.xz") / 1048576 ))
if [ "$size_mb" -ge "${LIMIT_MB:-56}" ]; then
  echo "gpu-check: $out.tar.xz is $size_mb MiB, over ${LIMIT_MB:-56} MiB" >&2
  exit 1
fi
echo "gpu-check: $out.tar.xz ($size_mb MiB) holds ${#tests[@]} GPU test programs; on the GPU machine:"
echo "  tar xJf $out.tar.xz && bash $out/check/run.sh RESULTS"
