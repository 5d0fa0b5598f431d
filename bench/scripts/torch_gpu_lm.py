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
import gc
import re
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_gpt import GPT, PRESETS

# model: (vocabulary, batch, block, dropout, steps(steps), warmup(warmup))
MODELS = {
    "gpt-mini": (256, 64, 256, 0.1, lambda s: s, lambda w: w),
    "gpt2": (50257, 16, 1024, 0.0, lambda s: max(s // 4, 10), lambda w: max(w // 2, 5)),
}
MODES = ["eager", "compile", "reduce-overhead"]


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
        # Each case compiles afresh: the guards of the last case's model would otherwise count
        # towards dynamo's recompile limit, past which it falls back to eager without a word.
        torch._dynamo.reset()
        net = torch.compile(net, mode=None if mode == "compile" else mode)

    def step():
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
            loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    return sec, loss.item(), sum(p.numel() for p in model.parameters()), flops_per_token(model, block)


def driver_version():
    """The driver's version as nvidia-smi shows it (the kernel module's), or "unknown"."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", f.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def cases(models, modes, dtypes, steps, warmup):
    """(model, dtype, mode, steps, warmup): the eager cases, then the compiled ones."""
    def of(model, dtype, mode):
        return (model, dtype, mode, MODELS[model][4](steps), MODELS[model][5](warmup))

    out = [of(m, d, "eager") for m in models for d in dtypes if "eager" in modes]
    out += [of(m, d, mode) for m in models for d in dtypes for mode in modes if mode != "eager"]
    return out


def count_params(models):
    for name in models:
        vocab, _, block, _, _, _ = MODELS[name]
        model = make_model(name)
        print(f"model={name} vocab={vocab} block={block} params={sum(p.numel() for p in model.parameters())} "
              f"flops_per_token={flops_per_token(model, block)}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100, help="timed steps per gpt-mini case (gpt2: fewer)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (gpt2: fewer)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--dtypes", default="f32,bf16", help="comma-separated: f32, bf16")
    ap.add_argument("--budget-s", type=float, default=0, help="start no case after this many seconds (0: no limit)")
    ap.add_argument("--peak-flops", type=float, default=0,
                    help="the GPU's dense bf16 peak in FLOP/s, for MFU (bench_gpu_lm's peak_flops=; 0: no MFU)")
    ap.add_argument("--count-params", action="store_true",
                    help="build the models on the CPU, print their parameters and FLOPs per token, and exit")
    args = ap.parse_args()
    models, modes, dtypes = args.models.split(","), args.modes.split(","), args.dtypes.split(",")
    checks = [("--models", models, MODELS), ("--modes", modes, MODES), ("--dtypes", dtypes, ["f32", "bf16"])]
    for flag, given, known in checks:
        unknown = [g for g in given if g not in known]
        if unknown:
            ap.error(f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.count_params:
        count_params(models)
        return
    if not torch.cuda.is_available():
        sys.exit("torch_gpu_lm.py: no CUDA GPU is available to PyTorch here")
    start = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    peak = f"{args.peak_flops:.0f}" if args.peak_flops else "unknown"
    print(f'torch={torch.__version__} gpu="{props.name}" sm={props.major}{props.minor} driver={driver_version()} '
          f"cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} peak_flops={peak}", flush=True)
    for model, dtype, mode, steps, warmup in cases(models, modes, dtypes, args.steps, args.warmup):
        vocab, batch, block, _, _, _ = MODELS[model]
        head = f"impl=torch-{mode} model={model} batch={batch} block={block} vocab={vocab} dtype={dtype}"
        if args.budget_s and time.monotonic() - start > args.budget_s:
            print(f"{head} skipped: the time budget (--budget-s {args.budget_s:g}) is spent", flush=True)
            continue
        torch.cuda.reset_peak_memory_stats()
        try:
            sec, loss, params, fpt = measure(model, dtype, mode, steps, warmup)
            tokens_per_s = batch * block * steps / sec
            mfu = f" mfu={tokens_per_s * fpt / args.peak_flops:.4f}" if args.peak_flops else ""
            print(f"{head} params={params} step_us={1e6 * sec / steps:.1f} tokens_per_s={tokens_per_s:.0f}{mfu} "
                  f"loss={loss:.4f} peak_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}", flush=True)
        except Exception as e:  # torch.compile may not work there: say so and go on
            print(f"{head} failed: {e!r}"[:400].replace("\n", " "), flush=True)
            traceback.print_exc(file=sys.stderr)
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
