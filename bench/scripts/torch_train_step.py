"""The same training step as bench/train_step.cpp, in PyTorch on the CPU (bench/train_step.sh runs it with current PyPI torch, or Debian's 1.13 with PYTHON=/usr/bin/python3).
--model seed_cnn (default: seed 001's Net, 1x28x28), resnet18_cifar (lockstep's CIFAR ResNet-18, 3x32x32) or resnet50 (3x224x224,
1000 classes), the ResNets channels_last as PyTorch's CPU convolutions run fastest; SGD at lr 0.01 on fixed random data."""
import argparse
import time

import torch
import torch.nn.functional as F

from resnets import make_resnet
from seed_cnn import Net


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="seed_cnn", choices=["seed_cnn", "resnet18_cifar", "resnet50"])
    ap.add_argument("--batch", default="32,128")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    resnet = args.model != "seed_cnn"
    net = make_resnet(args.model).to(memory_format=torch.channels_last) if resnet else Net()
    item, classes = {"seed_cnn": ((1, 28, 28), 10), "resnet18_cifar": ((3, 32, 32), 10), "resnet50": ((3, 224, 224), 1000)}[args.model]
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for batch in [int(b) for b in args.batch.split(",")]:
        x = torch.rand(batch, *item)
        if resnet:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.arange(batch) % classes
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
