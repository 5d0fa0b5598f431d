"""The same training step as bench/train_step.cpp, in PyTorch on the CPU (bench/train_step.sh runs it with current PyPI torch, or Debian's 1.13 with PYTHON=/usr/bin/python3).
--model seed_cnn (default: seed 001's Net, 1x28x28) or resnet18_cifar (lockstep's CIFAR ResNet-18, 3x32x32, channels_last as PyTorch's
CPU convolutions run fastest); SGD at lr 0.01 on fixed random data."""
import argparse
import time

import torch
import torch.nn.functional as F

from resnet_cifar import ResNet18Cifar
from seed_cnn import Net


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="seed_cnn", choices=["seed_cnn", "resnet18_cifar"])
    ap.add_argument("--batch", default="32,128")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    resnet = args.model == "resnet18_cifar"
    net = ResNet18Cifar().to(memory_format=torch.channels_last) if resnet else Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for batch in [int(b) for b in args.batch.split(",")]:
        x = torch.rand(batch, 3, 32, 32).contiguous(memory_format=torch.channels_last) if resnet else torch.rand(batch, 1, 28, 28)
        y = torch.arange(batch) % 10
        def step():
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.item()
        for _ in range(args.warmup):
            step()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        sec = time.perf_counter() - t0
        print(f"impl=torch version={torch.__version__} model={args.model} batch={batch} threads={torch.get_num_threads()} "
              f"step_ms={1000 * sec / args.steps:.3f} samples_per_s={batch * args.steps / sec:.0f} loss={loss:.4f}")


if __name__ == "__main__":
    main()
