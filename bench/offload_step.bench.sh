#!/usr/bin/env bash
# ZeRO-Offload's host step (issue 40: the optimizer states and the update live on the host and run
# with lockstep's vectorised CPU Adam): one Adam step over NUMEL f32 elements (default 33,554,432, a
# 33.5M-parameter partition; GPT-2 small's 124M take 3.7x as long) beside DeepSpeed's DeepSpeedCPUAdam
# (the optimizer of DeepSpeed's ZeRO-Offload, its C++ built for this CPU) and torch.optim.Adam (fused
# and default), at 1 thread and at all cores, then the other passes of lockstep's host step for bf16
# with gradient_clipping (check, norm, clip, rounding to bf16: bench_optimizer_step's
# offload_host_step line) and the same step fused (the norm, then one pass that clips, steps and
# rounds: its fused_host_step line, ZeroOptions::fused_host_step). Each peer runs with and without the glibc malloc tunables; the faster
# counts (bench/scripts/peer.sh).
#   bash bench/offload_step.bench.sh [BUILD_DIR]        NUMEL=..., STEPS=... (default 10)
# The peers come from PyPI (torch, deepspeed) in BUILD_DIR/bench-venv ($VENV, or $PYTHON).
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
bin=$build/bench/bench_optimizer_step
[ -x "$bin" ] || { echo "offload_step.bench.sh: $bin not built (cmake --build $build --target bench_optimizer_step)" >&2; exit 1; }
# shellcheck source=bench/scripts/peer.sh
source "$here/scripts/peer.sh"
numel=${NUMEL:-33554432}
steps=${STEPS:-10}
peer_python "$build" offload_step.bench deepspeed ninja
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "peer: $("$python" -c 'import torch, deepspeed; print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}")' 2>/dev/null | tail -n 1)"
rate() {  # KEY LINE...: the step_ms of optimizer=KEY
  local key=$1
  shift
  printf '%s\n' "$@" | sed -n "s/^optimizer=$key .*step_ms=\([0-9.]*\).*/\1/p" | head -n 1
}
for threads in 1 "$(nproc --all)"; do
  echo "== $threads thread(s), $numel elements, $steps steps"
  mapfile -t ours < <(OMP_NUM_THREADS=$threads "$bin" --numel "$numel" --steps "$steps")
  printf '%s\n' "${ours[@]}"
  mapfile -t plain < <(OMP_NUM_THREADS=$threads "$python" "$here/scripts/cpu_adam_peer.py" --numel "$numel" --steps "$steps" --threads "$threads" 2>/dev/null)
  mapfile -t tuned < <(GLIBC_TUNABLES=$tunables OMP_NUM_THREADS=$threads "$python" "$here/scripts/cpu_adam_peer.py" --numel "$numel" --steps "$steps" --threads "$threads" 2>/dev/null)
  ms=$(rate adam "${ours[@]}")
  for peer in deepspeed_cpu_adam torch_adam_fused torch_adam; do
    a=$(rate "$peer" "${plain[@]}")
    b=$(rate "$peer" "${tuned[@]}")
    if [ -z "$a$b" ]; then
      printf '%s\n' "${plain[@]}" | grep "^optimizer=$peer " || echo "optimizer=$peer (no result)"
      continue
    fi
    python3 -c "
import sys
ours, a, b = float(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = [(float(x), t) for x, t in ((a, 'off'), (b, 'on')) if x]
best, tun = min(runs)
print(f'optimizer={sys.argv[1]} step_ms={best:.2f} (malloc tunables {tun}); lockstep adam {ours:.2f} ms; '
      f'lockstep_speed_ratio={best / ours:.2f} (the peer\'s time over lockstep\'s: above 1, lockstep is faster)')
" "$peer" "$ms" "$a" "$b"
  done
done
