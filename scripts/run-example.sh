#!/usr/bin/env bash
# `make run`: the best real end-to-end example there is. Today: train the seed MNIST CNN on
# Fashion-MNIST (Debian's dataset-fashion-mnist) with the train_fashion_mnist example in one process
# (2 ranks once DistributedDataParallel lands), printing test accuracy and throughput.
set -euo pipefail
build=${1:-build}
data=/usr/share/datasets/fashion-mnist
example="$build/examples/train_fashion_mnist"
if [ ! -x "$example" ]; then
  echo "run-example: $example is not built" >&2
  exit 1
fi
args=(--data-dir "$data" --epochs "${EPOCHS:-5}" --batch-size "${BATCH_SIZE:-64}" --lr "${LR:-0.001}")
exec "$example" "${args[@]}"
