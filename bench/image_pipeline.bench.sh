#!/usr/bin/env bash
# ImageNet-style training input, side by side: lockstep's image_folder (bench_image_pipeline: decode,
# RandomResizedCrop(224), RandomHorizontalFlip, ToTensor + Normalize, batches of 64 from a DataLoader
# with W worker threads) vs torchvision's ImageFolder + DataLoader with the same transforms
# (scripts/torch_image_pipeline.py), on the same JPEGs, at 1 and 2 workers, one core per worker.
#   bench/image_pipeline.bench.sh [BUILD_DIR] [REPS] [EPOCHS]
# The images: `lockstep data make-image-folder` (Fashion-MNIST upscaled to a shorter side of
# MIN_SIDE..MAX_SIDE, default 160..320, re-encoded as JPEG), PER_CLASS (100) per class in 10 classes.
# Each process is pinned to cores 0..W-1 (taskset), its workers and main thread alike. Each repetition
# runs every configuration once, alternating the frameworks, and the summary takes medians, since
# other work on this machine moves the figures from minute to minute. Images/s count EPOCHS passes
# (default 2) after one warm-up pass.
# The peer's best case: current torch and torchvision from PyPI (Pillow; Pillow-SIMD is not on PyPI
# for current Pythons) in BUILD_DIR/bench-venv (bench/scripts/peer.sh), one torch thread per process,
# at W = 1 both num_workers=0 (the main process decodes) and num_workers=1, each without and with the
# glibc malloc tunables ($tunables); the fastest counts.
# Target (issue 41): lockstep >= 2x torchvision's images/s per core at 1 and 2 workers.
set -euo pipefail
build=${1:-build}
reps=${2:-3}
epochs=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1

source "$here/scripts/peer.sh"  # peer_python, $tunables
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc --all) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
peer_python "$build" image_pipeline.bench torchvision
echo "peer: $("$python" -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision", torchvision.__version__, "Pillow", PIL.__version__)')"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/lockstep" data make-image-folder -o "$dir/images" --train-per-class "${PER_CLASS:-100}" \
  --val-per-class 1 --min-side "${MIN_SIDE:-160}" --max-side "${MAX_SIDE:-320}" >&2

rate() { sed -n 's/.*images_per_second=\([0-9.]*\).*/\1/p' | tail -n 1; }
cores() { seq -s, 0 $(($1 - 1)); }
ours() {
  taskset -c "$(cores "$1")" "$build/bench/bench_image_pipeline" --root "$dir/images" --workers "$1" \
    --epochs "$epochs" | rate
}
# The fastest of the peer's variants at W workers; prints "RATE VARIANT".
theirs() {
  local w=$1 best=0 how="" nw tun r
  local variants=("$w")
  [ "$w" = 1 ] && variants=(0 1)
  for nw in "${variants[@]}"; do
    for tun in off on; do
      if [ "$tun" = on ]; then
        r=$(GLIBC_TUNABLES=$tunables taskset -c "$(cores "$w")" "$python" "$here/scripts/torch_image_pipeline.py" \
          --root "$dir/images" --workers "$nw" --epochs "$epochs" | rate)
      else
        r=$(taskset -c "$(cores "$w")" "$python" "$here/scripts/torch_image_pipeline.py" \
          --root "$dir/images" --workers "$nw" --epochs "$epochs" | rate)
      fi
      if python3 -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" "${r:-0}" "$best"; then
        best=$r how="num_workers=$nw,malloc_tunables=$tun"
      fi
    done
  done
  echo "$best $how"
}

results=()
for ((i = 1; i <= reps; i++)); do
  o1=$(ours 1)
  read -r t1 h1 < <(theirs 1)
  read -r t2 h2 < <(theirs 2)
  o2=$(ours 2)
  echo "rep $i: lockstep 1 worker $o1, 2 workers $o2; torchvision 1 worker $t1 ($h1), 2 workers $t2 ($h2) (images/s)"
  results+=("$o1 $o2 $t1 $t2")
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
o1, o2, t1, t2 = (statistics.median(col) for col in zip(*rows))
print(f"median of {len(rows)} (images/s per core): lockstep 1 worker {o1:.0f}, 2 workers {o2 / 2:.0f}; "
      f"torchvision 1 worker {t1:.0f}, 2 workers {t2 / 2:.0f}")
r1 = statistics.median(r[0] / r[2] for r in rows)
r2 = statistics.median(r[1] / r[3] for r in rows)
print(f"lockstep / torchvision: ratio of the medians 1 worker {o1 / t1:.2f}x, 2 workers {o2 / t2:.2f}x; "
      f"median of the per-repetition ratios {r1:.2f}x, {r2:.2f}x (target >= 2x)")
'
