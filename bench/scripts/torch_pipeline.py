"""PyTorch's side of bench/pipeline.bench.sh: torch_gpt.py's GPT split by layers across the ranks with
torch.distributed.pipelining (a PipelineStage per rank, Schedule1F1B or ScheduleGPipe), trained on
the same fixed random tokens with AdamW as bench/pipeline.cpp. Started with torchrun's variables
(one rank per stage, gloo). The cut is bench_pipeline's: the embedding with the first blocks, the
rest of the blocks with the head; with --schedule interleaved_1f1b the blocks in stages x
--virtual-stages parts, rank r holding parts r, r + S, ... (ScheduleInterleaved1F1B's loop order); the output layer tied to the embedding is summed over the first
and the last stage after each step's backward (torch.distributed.pipelining leaves ties to the
user), so both sides train the same model. Rank 0 prints
  samples_per_s=123.4 tokens_per_s=7898 schedule=1f1b stages=2 micro_batches=8
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, PRESETS  # noqa: E402


class First(nn.Module):
    def __init__(self, gpt, blocks):
        super().__init__()
        tr = gpt.transformer
        self.wte, self.wpe, self.drop = tr.wte, tr.wpe, tr.drop
        self.blocks = nn.ModuleList(blocks)

    def forward(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device)))
        for b in self.blocks:
            x = b(x)
        return x


class Middle(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class Last(nn.Module):
    def __init__(self, gpt, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.ln_f, self.lm_head = gpt.transformer.ln_f, gpt.lm_head

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def peer_arguments(schedules):
    """bench_pipeline's arguments that every peer of bench/pipeline.bench.sh takes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-type", default="gpt-mini", choices=sorted(PRESETS))
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--schedule", choices=schedules, default="1f1b")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    return ap


def fixed_tokens(args):
    """The step's batch, the same every step: inputs and next-token targets of micro_batch x
    micro_batches rows."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 256, (args.micro_batch * args.micro_batches, args.block_size + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def timed_steps(args, step, rank, stages, extra=""):
    """Runs step() warmup then steps times; rank 0 prints the rate of the timed ones."""
    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        samples = args.steps * args.micro_batch * args.micro_batches / seconds
        print(f"samples_per_s={samples:.2f} tokens_per_s={samples * args.block_size:.0f} schedule={args.schedule} "
              f"stages={stages} micro_batches={args.micro_batches}{extra}", flush=True)


def main():
    ap = peer_arguments(["1f1b", "gpipe", "interleaved_1f1b"])
    ap.add_argument("--virtual-stages", type=int, default=1)
    ap.add_argument("--boundaries", type=int, nargs="+", help="bench_pipeline's --boundaries: [0, b1, ..., layers]")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, stages = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(42)
    n_layer, n_head, c = PRESETS[args.model_type]
    gpt = GPT(256, args.block_size, n_layer, n_head, c, 0.0, "sdpa")
    blocks = list(gpt.transformer.h)
    parts = stages * args.virtual_stages
    # bench_pipeline's default split: layer 0 the embedding, 1..n_layer the blocks, then the head.
    bounds = [0] + [1 + n_layer * p // parts for p in range(1, parts)] + [n_layer + 2]
    if args.boundaries:
        bounds = args.boundaries
        assert len(bounds) == parts + 1 and bounds[0] == 0 and bounds[-1] == n_layer + 2, bounds
    modules, pipe_stages = [], []
    for p in range(rank, parts, stages):
        mine = blocks[max(bounds[p] - 1, 0):min(bounds[p + 1] - 1, n_layer)]
        if p == 0:
            module = First(gpt, mine)
        elif p == parts - 1:
            module = Last(gpt, mine)
        else:
            module = Middle(mine)
        module.train()
        modules.append(module)
        pipe_stages.append(PipelineStage(module, p, parts, torch.device("cpu")))
    module = nn.ModuleList(modules)

    def loss_fn(out, target):
        return F.cross_entropy(out.flatten(0, 1), target.flatten())

    if args.schedule == "interleaved_1f1b":
        schedule = ScheduleInterleaved1F1B(pipe_stages, n_microbatches=args.micro_batches, loss_fn=loss_fn)
    else:
        kind = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
        schedule = kind(pipe_stages[0], n_microbatches=args.micro_batches, loss_fn=loss_fn)
    opt = torch.optim.AdamW(module.parameters(), lr=3e-4)
    tied = gpt.transformer.wte.weight
    tie_group = dist.new_group([0, stages - 1]) if stages > 1 else None
    x, y = fixed_tokens(args)

    def step():
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(x)
        elif rank == stages - 1:
            schedule.step(target=y)
        else:
            schedule.step()
        if rank in (0, stages - 1):
            if tied.grad is None:
                tied.grad = torch.zeros_like(tied)
            dist.all_reduce(tied.grad, group=tie_group)
        opt.step()

    timed_steps(args, step, rank, stages)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
