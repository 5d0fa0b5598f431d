"""DeepSpeed's side of bench/pipeline.bench.sh: torch_gpt.py's GPT as a DeepSpeed PipelineModule (its
pipeline engine, 1F1B TrainSchedule, the only training schedule DeepSpeed has), trained on the same fixed
random tokens with AdamW as bench/pipeline.cpp, on DeepSpeed's CPU accelerator over gloo. Started with
torchrun's variables (one rank per stage). The layers: the embedding (token + position), the blocks, the
final layer norm and the output layer; the output layer is a TiedLayerSpec of the embedding, DeepSpeed's
own way to keep the two tied across stages (it sums the tied weight's gradient over the stages holding
it). partition_method "type:Block" balances the blocks: the embedding with the first half of them, the
rest with the head, bench_pipeline's default cut (printed per rank). gradient_accumulation_steps is the
number of micro-batches, as in DeepSpeed's pipelines. Rank 0 prints
  samples_per_s=123.4 tokens_per_s=7898 schedule=1f1b stages=2 micro_batches=8 impl=deepspeed version=<v>
"""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import PRESETS, Block  # noqa: E402
from torch_pipeline import fixed_tokens, peer_arguments, timed_steps  # noqa: E402


class Embed(nn.Module):
    """The token and position embeddings; as the tied head it is the output layer."""

    def __init__(self, vocab, block, c):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)

    def forward(self, idx):
        return self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))


def head(embed, x):
    return F.linear(x, embed.wte.weight)


def main():
    args = peer_arguments(["1f1b"]).parse_args()

    import deepspeed
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec

    deepspeed.init_distributed(dist_backend="gloo")
    import torch.distributed as dist
    rank, stages = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(42)
    n_layer, n_head, c = PRESETS[args.model_type]
    vocab = 256
    layers = [TiedLayerSpec("embed", Embed, vocab, args.block_size, c, tied_weight_attr="wte.weight")]
    layers += [LayerSpec(Block, c, n_head, args.block_size, 0.0, "sdpa") for _ in range(n_layer)]
    layers += [LayerSpec(nn.LayerNorm, c),
               TiedLayerSpec("embed", Embed, vocab, args.block_size, c, forward_fn=head, tied_weight_attr="wte.weight")]

    def loss_fn(out, target):
        return F.cross_entropy(out.flatten(0, 1), target.flatten())

    model = PipelineModule(layers=layers, num_stages=stages, loss_fn=loss_fn, partition_method="type:Block",
                           activation_checkpoint_interval=0)
    print(f"deepspeed_pipeline: rank {rank} holds layers {model._local_start}..{model._local_stop - 1} of "
          f"{len(layers)} (0 the embedding, {len(layers) - 1} the tied head)", file=sys.stderr, flush=True)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4)
    config = {
        "train_batch_size": args.micro_batch * args.micro_batches,
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": args.micro_batches,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
        "pipeline": {"activation_checkpoint_interval": 0},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)

    x, y = fixed_tokens(args)
    micro = [(x[i:i + args.micro_batch], y[i:i + args.micro_batch]) for i in range(0, len(x), args.micro_batch)]

    def batches():
        while True:
            yield from micro

    data = batches()
    timed_steps(args, lambda: engine.train_batch(data_iter=data), rank, stages,
                f" impl=deepspeed version={deepspeed.__version__}")
    dist.barrier()  # no destroy_process_group: with DeepSpeed's groups it aborts the process at exit


if __name__ == "__main__":
    main()
