#!/usr/bin/env bash
# `make run`: train the seed MNIST CNN (mnist_cnn) on Fashion-MNIST (Debian's dataset-fashion-mnist)
# with Adam on 2 local ranks started by `lockstep run` (DistributedDataParallel over the shm
# backend), printing test accuracy and throughput. Per-rank batch 32 = global batch 64.
# Override with NPROC, EPOCHS, BATCH_SIZE (per rank), LR.
set -euo pipefail
build=${1:-build}
data=/usr/share/datasets/fashion-mnist
example="$build/examples/train_fashion_mnist"
for f in "$build/lockstep" "$example"; do
  if [ ! -x "$f" ]; then
    echo "run-example: $f is not built (run 'make build')" >&2
    exit 1
  fi
done
nproc=${NPROC:-2}
echo "run-example: lockstep run --nproc-per-node $nproc --standalone $example (Fashion-MNIST, ${EPOCHS:-5} epochs)"
exec "$build/lockstep" run --nproc-per-node "$nproc" --standalone "$example" \
  --data-dir "$data" --epochs "${EPOCHS:-5}" --batch-size "${BATCH_SIZE:-32}" --lr "${LR:-0.001}"
