"""PyTorch's side of bench/gpu_lm.bench.sh: language-model training steps on one GPU, the same cases
as lockstep's bench/gpu_lm.cpp. The model is torch_gpt.py's GPT (minGPT/nanoGPT: learned positions,
pre-norm blocks with biased LayerNorm and Linear layers, tanh GELU, the output layer tied to the
token embedding, minGPT's init) with F.scaled_dot_product_attention(is_causal=True), as lockstep's
gpt; fixed random tokens (each row one stream of block + 1, the target the input shifted by one),
mean cross entropy over every position, torch.optim.AdamW(fused=True) with lr 6e-4, betas (0.9,
0.95), weight decay 0.1 on every parameter, no clipping:
  gpt-mini  batch 64 x block 256, vocabulary 256 (2,767,872 parameters), dropout 0.1
  gpt2      GPT-2 small, batch 16 x block 1024, vocabulary 50257 (124,439,808 parameters), dropout 0
f32 (TF32 off: PyTorch's default) and bf16 autocast; eager, torch.compile of the model and loss
(default mode, nanoGPT's) and torch.compile(mode="reduce-overhead") (CUDA graphs). gpt2 times
max(steps // 4, 10) steps after max(warmup // 2, 5).

MFU is nanoGPT's estimate_mfu: 6 N + 12 L H Q T FLOPs per token, N the parameters less the position
embedding, over --peak-flops (the GPU's dense bf16 peak; gpu_lm.bench.sh passes bench_gpu_lm's
peak_flops=, from lockstep's table in lockstep/train/monitor/model_flops.cpp); without it, no mfu=.

Cases run cheapest first: every eager case, then the compiled ones model by model in --models order
(per dtype, the modes in --modes order). A case that throws prints a `failed:` line (its traceback
goes to stderr) and the next one runs; with --budget-s, a case that would start after that many
seconds prints a `skipped:` line instead. The first line names the versions (torch, GPU, driver,
CUDA, cuDNN); then one line per case: impl=... model=... tokens_per_s=... mfu=...
--count-params builds the models on the CPU and prints their parameters and FLOPs per token, the
lines `bench_gpu_lm --count-params` prints for lockstep's (no GPU needed)."""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gpu_bench
from torch_gpt import GPT, PRESETS

# model: (vocabulary, batch, block, dropout, steps(steps), warmup(warmup))
MODELS = {
    "gpt-mini": (256, 64, 256, 0.1, lambda s: s, lambda w: w),
    "gpt2": (50257, 16, 1024, 0.0, lambda s: max(s // 4, 10), lambda w: max(w // 2, 5)),
}


def make_model(name):
    vocab, _, block, dropout, _, _ = MODELS[name]
    n_layer, n_head, width = PRESETS[name]
    return GPT(vocab, block, n_layer, n_head, width, dropout, "sdpa")


def flops_per_token(model, block):
    """nanoGPT's estimate_mfu numerator per token: 6 N + 12 L H Q T (H Q = the width)."""
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * n + 12 * len(model.transformer.h) * model.transformer.wpe.weight.shape[1] * block


class WithLoss(nn.Module):
    """The model and its loss in one module, so that torch.compile takes both (nanoGPT's forward)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        logits = self.model(x)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))


def measure(model_name, dtype, mode, steps, warmup):
    vocab, batch, block, _, _, _ = MODELS[model_name]
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = make_model(model_name).to(dev)
    model.train()
    tokens = torch.randint(vocab, (batch, block + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    net = WithLoss(model)
    if mode != "eager":
        net = gpu_bench.compiled(net, mode)

    def step():
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
            loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    sec, loss = gpu_bench.time_steps(step, warmup, steps)
    return sec, loss.item(), sum(p.numel() for p in model.parameters()), flops_per_token(model, block)


def cases(models, modes, dtypes, steps, warmup):
    """(model, dtype, mode, steps, warmup): the eager cases, then the compiled ones."""
    def of(model, dtype, mode):
        return [(model, dtype, mode, MODELS[model][4](steps), MODELS[model][5](warmup))]

    return gpu_bench.eager_first(models, modes, dtypes, of)


def count_params(models):
    for name in models:
        vocab, _, block, _, _, _ = MODELS[name]
        model = make_model(name)
        print(f"model={name} vocab={vocab} block={block} params={sum(p.numel() for p in model.parameters())} "
              f"flops_per_token={flops_per_token(model, block)}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpu_bench.add_case_args(ap, MODELS, 100, "timed steps per gpt-mini case (gpt2: fewer)",
                            10, "untimed steps first (gpt2: fewer)")
    ap.add_argument("--peak-flops", type=float, default=0,
                    help="the GPU's dense bf16 peak in FLOP/s, for MFU (bench_gpu_lm's peak_flops=; 0: no MFU)")
    ap.add_argument("--count-params", action="store_true",
                    help="build the models on the CPU, print their parameters and FLOPs per token, and exit")
    args = ap.parse_args()
    models, modes, dtypes = gpu_bench.case_lists(ap, args, MODELS)
    if args.count_params:
        count_params(models)
        return
    if not torch.cuda.is_available():
        sys.exit("torch_gpu_lm.py: no CUDA GPU is available to PyTorch here")
    start = time.monotonic()
    gpu_bench.print_versions(f"peak_flops={args.peak_flops:.0f}" if args.peak_flops else "peak_flops=unknown")

    def case(model, dtype, mode, steps, warmup):
        vocab, batch, block, _, _, _ = MODELS[model]
        head = f"impl=torch-{mode} model={model} batch={batch} block={block} vocab={vocab} dtype={dtype}"

        def run():
            sec, loss, params, fpt = measure(model, dtype, mode, steps, warmup)
            tokens_per_s = batch * block * steps / sec
            mfu = f" mfu={tokens_per_s * fpt / args.peak_flops:.4f}" if args.peak_flops else ""
            return (f"params={params} step_us={1e6 * sec / steps:.1f} tokens_per_s={tokens_per_s:.0f}{mfu} "
                    f"loss={loss:.4f}")

        return head, run

    todo = [case(*c) for c in cases(models, modes, dtypes, args.steps, args.warmup)]
    gpu_bench.run_cases(todo, args.budget_s, start)


if __name__ == "__main__":
    main()
