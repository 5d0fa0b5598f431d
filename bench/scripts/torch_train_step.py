"""The same training step as bench/train_step.cpp, in PyTorch on the CPU (bench/train_step.sh runs it with current PyPI torch, or Debian's 1.13 with PYTHON=/usr/bin/python3)."""
import argparse
import time

import torch
import torch.nn.functional as F

from seed_cnn import Net



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="32,128")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for batch in [int(b) for b in args.batch.split(",")]:
        x = torch.rand(batch, 1, 28, 28)
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
        print(f"impl=torch version={torch.__version__} batch={batch} threads={torch.get_num_threads()} step_ms={1000 * sec / args.steps:.3f} "
              f"samples_per_s={batch * args.steps / sec:.0f} loss={loss:.4f}")


if __name__ == "__main__":
    main()
