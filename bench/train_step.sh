#!/usr/bin/env bash
# Side by side, one thread and one core each: lockstep's and PyTorch's training step of the seed MNIST CNN
# (MODEL=seed_cnn, the default), the CIFAR ResNet-18 (MODEL=resnet18_cifar) or ResNet-50 at 224x224 (MODEL=resnet50),
# the ResNets channels_last on both sides.
#   [MODEL=resnet18_cifar] bench/train_step.sh [BUILD_DIR] [BATCHES] [STEPS]
# Prints both results and, per batch size, ratio = torch_step_ms / lockstep_step_ms (seed CNN target >= 2).
# The peer: current PyTorch from PyPI in a virtual environment (BUILD_DIR/bench-venv, created on first
# use; PYTHON=/usr/bin/python3 runs Debian's 1.13 instead), run without and with the glibc malloc
# tunables; per batch size the faster counts.
set -euo pipefail
build=${1:-build}
batches=${2:-32,128}
steps=${3:-200}
model=${MODEL:-seed_cnn}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
source "$here/scripts/peer.sh"
peer_python "$build" train_step
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p')"
ours=$(taskset -c 0 "$build/bench/bench_train_step" --model "$model" --batch "$batches" --steps "$steps")
plain=$(taskset -c 0 "$python" "$here/scripts/torch_train_step.py" --model "$model" --batch "$batches" --steps "$steps")
tuned=$(GLIBC_TUNABLES=$tunables taskset -c 0 "$python" "$here/scripts/torch_train_step.py" --model "$model" --batch "$batches" --steps "$steps")
echo "$ours"
echo "$plain (malloc tunables off)"
echo "$tuned (malloc tunables on)"
ms() { sed -n "s/.*batch=$1 .*step_ms=\([0-9.]*\).*/\1/p"; }
for b in ${batches//,/ }; do
  o=$(echo "$ours" | ms "$b")
  t=$( (echo "$plain" | ms "$b"; echo "$tuned" | ms "$b") | sort -g | head -n 1)
  python3 -c "print(f'model=$model batch=$b lockstep_ms=$o torch_ms=$t ratio={$t/$o:.2f}x (torch time / lockstep time, its faster run)')"
done
