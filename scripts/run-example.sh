#!/usr/bin/env bash
# `make run`: the config-driven trainer on the seed MNIST CNN (mnist_cnn) and Fashion-MNIST (Debian's
# dataset-fashion-mnist): `lockstep train examples/configs/fashion_mnist_cnn.yaml --nproc-per-node 2`,
# i.e. 2 local ranks with DistributedDataParallel, Adam 1e-3, micro batch 32 per rank, 5 epochs.
# Prints validation accuracy each epoch, then test accuracy and samples/s; writes out/run/.
# Override with NPROC and EPOCHS.
set -euo pipefail
build=${1:-build}
if [ ! -x "$build/lockstep" ]; then
  echo "run-example: $build/lockstep is not built (run 'make build')" >&2
  exit 1
fi
exec "$build/lockstep" train examples/configs/fashion_mnist_cnn.yaml --nproc-per-node "${NPROC:-2}" \
  --output-dir out/run --set "epochs=${EPOCHS:-5}"
