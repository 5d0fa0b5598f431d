#!/usr/bin/env bash
# DDP throughput, side by side: lockstep's train_fashion_mnist vs PyTorch DDP (gloo), seed 001's CNN,
# Fashion-MNIST, per-rank batch 32, one thread per rank, 1 and 2 ranks on this machine.
#   bench/ddp.bench.sh [BUILD_DIR] [STEPS] [REPS]
# Each repetition runs the configurations back to back (lockstep 1 and 2 ranks, lockstep 2 ranks
# with comm hook noop, torch 1 and 2 ranks); the summary takes the median of each over the
# repetitions, since this VM's speed drifts by 5-10% from minute to minute. Rank r is bound to core
# r (taskset), for both frameworks alike; BIND=0 leaves placement to the scheduler. samples/s
# leaves out each run's first WARMUP steps (default 20; the first step builds the kernels), alike.
# The noop runs synchronise no gradients (PyTorch's debugging noop_hook): two ranks that compute
# the same steps apart, their samples/s taken at the slower rank's pace (the job's end). Their scaling is the ceiling this machine leaves (shared caches and memory,
# the hypervisor); the distance from it to the real 2-rank run is what synchronisation costs: the
# allreduce, and each step waiting for the slower of the two ranks.
# The lockstep 2-rank runs also report, per rank, where each step's time went (--ddp-timings):
# backward_comm_wait is how long backward() was held by the gradient allreduce, which includes
# waiting for the other rank to finish its own backward; its share of the step is the part of the
# 1 -> 2 rank scaling loss that synchronous data parallelism spends in communication and skew.
# Targets: lockstep at 2 ranks >= 3x PyTorch's samples/s at 2 ranks; 1 -> 2 rank scaling >= 95%.
# The peer: current PyTorch from PyPI in a virtual environment (BUILD_DIR/bench-venv, created on first
# use; PYTHON=/usr/bin/python3 runs Debian's 1.13 instead). Each torch run is made without and with the
# glibc malloc tunables; the faster counts (bench/scripts/peer.sh: peer_best).
# TORCH=0 leaves PyTorch out (lockstep's scaling only), so that many repetitions fit in minutes.
set -euo pipefail
build=${1:-build}
steps=${2:-1000}
reps=${3:-3}
bind=${BIND:-1}
warmup=${WARMUP:-20}
with_torch=${TORCH:-1}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
port=$((29700 + RANDOM % 200))

timings=$(mktemp -d)
trap 'rm -rf "$timings"' EXIT

source "$here/scripts/peer.sh"  # run_ranks (BIND, ERR_TO), peer_best
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc --all) cores"
if [ "$with_torch" != 0 ]; then
  peer_python "$build" ddp.bench
  echo "torch: $("$python" -c 'import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())')"
fi

# CPU time the hypervisor took from this VM (steal) as a share of the CPU time its work asked for:
# snap prints "busy steal" ticks from /proc/stat; steal_pct BEFORE AFTER gives the share between.
snap() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $9}' /proc/stat; }
steal_pct() { python3 -c "import sys; b0, s0, b1, s1 = map(int, sys.argv[1:]); print(f'{100 * (s1 - s0) / max(b1 - b0, 1):.1f}')" $1 $2; }

rate() { sed -n 's/.*samples_per_second=\([0-9.]*\).*/\1/p' | tail -n 1; }

# Both frameworks' DDP keep gradients in their buckets (gradient_as_bucket_view; no copy back).
ours=(--epochs 1 --max-steps "$steps" --warmup-steps "$warmup" --batch-size 32 --num-workers 0 --gradient-as-bucket-view)
theirs=(--max-steps "$steps" --warmup-steps "$warmup" --batch-size 32 --gradient-as-bucket-view)
results=()
steals=()
for ((i = 1; i <= reps; i++)); do
  a=$(snap)
  o1=$(run_ranks 1 "$build/examples/train_fashion_mnist" "${ours[@]}" 2>/dev/null | rate)
  b=$(snap)
  o2=$(ERR_TO="$timings/rep$i" run_ranks 2 "$build/examples/train_fashion_mnist" "${ours[@]}" --ddp-timings | rate)
  c=$(snap)
  on=$(run_ranks 2 "$build/examples/train_fashion_mnist" "${ours[@]}" --comm-hook noop 2>/dev/null | rate)
  st1=$(steal_pct "$a" "$b")
  st2=$(steal_pct "$b" "$c")
  t1=nan t2=nan
  if [ "$with_torch" != 0 ]; then
    read -r t1 m1 < <(peer_best samples_per_second 1 "$python" "$here/scripts/torch_ddp_fashion_mnist.py" "${theirs[@]}")
    read -r t2 m2 < <(peer_best samples_per_second 2 "$python" "$here/scripts/torch_ddp_fashion_mnist.py" "${theirs[@]}")
  fi
  theirs_line="torch 1 rank $t1 (malloc tunables ${m1:-}), 2 ranks $t2 (${m2:-})"
  [ "$with_torch" = 0 ] && theirs_line="torch not run"
  echo "rep $i: lockstep 1 rank $o1, 2 ranks $o2 (no gradient sync: $on); $theirs_line" \
    "(samples/s); steal during lockstep 1 rank $st1%, 2 ranks $st2%"
  steals+=("$st1 $st2")
  grep -h '^rank=' "$timings/rep$i".* | sed 's/^/  lockstep 2 ranks: /' || true
  results+=("$o1 $o2 $t1 $t2 $on")
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
o1, o2, t1, t2, on = (statistics.median(c) for c in zip(*rows))
each = [r[1] / (2 * r[0]) for r in rows]
each_noop = [r[4] / (2 * r[0]) for r in rows]
binding = "rank r on core r" if sys.argv[1] == "1" else "none"
print(f"median of {len(rows)} (binding: {binding}):")
print(f"lockstep: 1 rank {o1:.0f} samples/s, 2 ranks {o2:.0f} samples/s, scaling {o2 / (2 * o1):.1%}"
      " (per rep: " + ", ".join(f"{s:.1%}" for s in each) + ")")
print(f"lockstep 2 ranks with no gradient sync (comm hook noop): {on:.0f} samples/s, scaling {on / (2 * o1):.1%}"
      " (per rep: " + ", ".join(f"{s:.1%}" for s in each_noop) + "): the ceiling this machine leaves; "
      f"synchronisation costs the remaining {100 * (on - o2) / (2 * o1):.1f} points")
if t1 == t1:  # not nan: PyTorch ran
    print(f"torch:    1 rank {t1:.0f} samples/s, 2 ranks {t2:.0f} samples/s, scaling {t2 / (2 * t1):.1%}")
    print(f"2 ranks: lockstep / torch = {o2 / t2:.2f}x (target >= 3x); lockstep scaling target >= 95%")
else:
    print("torch: not run (TORCH=0); lockstep scaling target >= 95%")
' "$bind"
cat "$timings"/rep*.* | python3 -c '
import re, statistics, sys
share = {}
for line in sys.stdin:
    m = re.search(r"rank=(\d+) step_ms=([\d.]+) .*backward_comm_wait_ms=([\d.]+)", line)
    if m:
        share.setdefault(int(m[1]), []).append(float(m[3]) / float(m[2]))
if share:
    print("lockstep 2 ranks, backward held by the gradient allreduce (incl. waiting for the other rank),"
          " median share of the step: " + ", ".join(f"rank {r} {statistics.median(v):.1%}" for r, v in sorted(share.items())))
'
printf '%s\n' "${steals[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
s1, s2 = (statistics.median(c) for c in zip(*rows))
print(f"CPU time taken by the hypervisor (steal), median: lockstep 1 rank {s1:.1f}%, 2 ranks {s2:.1f}%"
      " of the CPU time asked for")
'
