#!/usr/bin/env bash
# `make bench`: every benchmark, each side by side with PyTorch where the target is a ratio.
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
echo "== training step of the seed MNIST CNN, 1 thread (target: >= 2x PyTorch)"
bash "$here/train_step.sh" "$build"
for extra in "$here"/*.bench.sh; do
  [ -e "$extra" ] || continue
  echo "== $(basename "$extra")"
  bash "$extra" "$build"
done
