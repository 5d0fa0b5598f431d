"""PyTorch DDP (gloo) twin of examples/train_fashion_mnist: seed 001's CNN (logits), Adam 1e-3,
Fashion-MNIST from Debian's IDX files, per-rank batch --batch-size, DistributedSampler.
Start each rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (torchrun breaks on Python 3.11).
samples/s leaves out the first --warmup-steps steps; --comm-hook noop (torch's debugging noop_hook) and
--gradient-as-bucket-view set DDP up as the lockstep flags of those names do.
Prints (rank 0): impl=torch ... world=<n> steps=<n> samples_per_second=<all ranks, at the slowest rank's pace>
train_seconds=<the slowest rank's, after the warm-up> test_accuracy=<0..1>"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from seed_cnn import Net


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-steps", type=int, default=600)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--comm-hook", choices=["allreduce", "noop"], default="allreduce")
    ap.add_argument("--gradient-as-bucket-view", action="store_true")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="bf16 / fp16: torch.autocast('cpu', dtype) around forward and loss (fp16 with a GradScaler)")
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(1)
    x = torch.from_numpy(load_idx(f"{args.data_dir}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530
    y = torch.from_numpy(load_idx(f"{args.data_dir}/train-labels-idx1-ubyte.gz").astype(np.int64))
    tx = torch.from_numpy(load_idx(f"{args.data_dir}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    tx = (tx - 0.2860) / 0.3530
    ty = torch.from_numpy(load_idx(f"{args.data_dir}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    ds = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=world, rank=rank, seed=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, sampler=sampler)
    model = Net()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=args.gradient_as_bucket_view)
        if args.comm_hook == "noop":
            from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
            model.register_comm_hook(None, noop_hook)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler("cpu") if args.precision == "fp16" else None
    steps, samples, seconds = 0, 0, 0.0
    done = False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        for data, target in loader:
            with torch.autocast("cpu", dtype=low, enabled=low is not None):
                loss = F.cross_entropy(model(data), target)
            opt.zero_grad()
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            steps += 1
            samples += data.shape[0] * world
            if steps == args.warmup_steps:  # the clock starts now
                t0, seconds, samples = time.perf_counter(), 0.0, 0
            if args.max_steps and steps >= args.max_steps:
                done = True
                break
        seconds += time.perf_counter() - t0
        if done:
            break
    if world > 1:  # the job's time is the slowest rank's (with noop_hook the ranks do not wait)
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        seconds = t.item()
    with torch.no_grad():
        model.eval()
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    if rank == 0:
        cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "n/a")()
        print(f"impl=torch version={torch.__version__} cpu_capability={cap} precision={args.precision} "
              f"world={world} steps={steps} samples_per_second={samples / seconds:.1f} train_seconds={seconds:.1f} "
              f"test_accuracy={acc:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
