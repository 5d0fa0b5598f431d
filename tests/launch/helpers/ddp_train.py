# A PyTorch DDP script as the tutorials write it, nothing lockstep-specific: the process group from
# the environment (env://, gloo), a DistributedSampler, DDP around a tiny model on synthetic data,
# the mean loss over the ranks printed by rank 0 at every step. tests/launch/pytorch_test.cpp runs it
# under `lockstep run` and under torchrun and compares the printed losses.
#
#   --crash-once-at-step S   rank 1 of the first attempt (TORCHELASTIC_RESTART_COUNT=0) exits with
#                            code 3 at step S: a restart must then train to the end
#   --raise-at-step S        rank 1 raises ValueError at step S inside @record: the agent shows the
#                            error file it writes (TORCHELASTIC_ERROR_FILE) as the root cause
#   --unreachable-rank R     rank R dials a port nobody listens on instead of MASTER_PORT, as if
#                            rank 0's host could not be reached from its own: the agent must name it
#   --env-out PREFIX         each rank writes its environment to PREFIX.RANK, one NAME=VALUE a line
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--crash-once-at-step", type=int, default=-1)
    parser.add_argument("--raise-at-step", type=int, default=-1)
    parser.add_argument("--unreachable-rank", type=int, default=-1)
    parser.add_argument("--env-out", default="")
    args = parser.parse_args()

    if args.env_out:
        with open(f"{args.env_out}.{os.environ['RANK']}", "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in sorted(os.environ.items()) if "\n" not in v)

    if int(os.environ["RANK"]) == args.unreachable_rank:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(64, 1)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    print(f"rank {rank} of {world}: {len(sampler)} samples per epoch", flush=True)

    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if rank == 1 and step == args.crash_once_at_step and restart == 0:
                print(f"rank 1 crashes at step {step} (attempt {restart})", file=sys.stderr, flush=True)
                # A crash, not a clean exit: sys.exit would tear the interpreter down with gloo's
                # threads still running, which torch sometimes ends in std::terminate (SIGABRT)
                # instead of exit code 3.
                os._exit(3)
            if rank == 1 and step == args.raise_at_step:
                raise ValueError(f"bad batch at step {step} on rank {rank}")
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                print(f"step {step} loss {mean.item() / world!r}", flush=True)
            step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
