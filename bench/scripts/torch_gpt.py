"""PyTorch twin of `lockstep train examples/configs/gpt_fortunes.yaml`: minGPT's GPT (gpt-mini by default:
6 layers, 6 heads, 192 wide; learned positions, pre-norm blocks, tanh GELU, output layer tied to the token
embedding, minGPT's init) on Debian's fortunes as bytes (the last 10% held out), windows of block_size + 1
tiling the stream, DistributedSampler, AdamW (0.9, 0.95), weight decay 0.1, clipping 1.0.
--attention mingpt: minGPT's CausalSelfAttention (q k^T, masked_fill, softmax, dropout, @ v);
--attention sdpa: F.scaled_dot_product_attention(is_causal=True). --compile wraps the model in torch.compile.
Start each rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (DDP over gloo when WORLD_SIZE > 1).
tokens/s leaves out the first --warmup-steps steps.
--order-file FILE trains on exactly those batches (one line per step: window indices, e.g. from
bench_train_order, the order `lockstep train` uses); --eval-at STEPS evaluates the validation windows
(all of them, tiled, eval mode: what lockstep's val_loss is) after those steps and prints
`val step=<n> val_loss=<mean>`; --log-every N prints `train step=<n> loss=<that step's loss>` every N steps
(what lockstep's steps_per_print logs).
Prints (rank 0): impl=torch attention=<a> compile=<0|1> world=<n> steps=<n> tokens_per_second=<all ranks> loss=<last>"""
import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def corpus(path):
    names = sorted(n for n in os.listdir(path)
                   if not n.endswith(".dat") and not os.path.islink(os.path.join(path, n))
                   and os.path.isfile(os.path.join(path, n)))
    text = b""
    for n in names:
        with open(os.path.join(path, n), "rb") as f:
            text += f.read()
        if not text.endswith(b"\n"):
            text += b"\n"
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).to(torch.int64)


def load_safetensors(path):
    """A safetensors file's tensors by name (f32, bf16, f16; no safetensors package needed)."""
    import json
    import struct
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + end]), dtype=dtypes[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


class Attention(nn.Module):
    def __init__(self, c, h, block, p, kind):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.attn_dropout = nn.Dropout(p)
        self.resid_dropout = nn.Dropout(p)
        self.h, self.p, self.kind = h, p, kind
        if kind == "mingpt":  # sdpa's is_causal needs no mask (at block 1024 it would take 4 MiB a layer)
            self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        if self.kind == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, c, h, block, p, kind):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = Attention(c, h, block, p, kind)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(c, 4 * c), c_proj=nn.Linear(4 * c, c), dropout=nn.Dropout(p)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.dropout(m.c_proj(F.gelu(m.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, c, p, kind):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(block, c), drop=nn.Dropout(p),
            h=nn.ModuleList([Block(c, n_head, block, p, kind) for _ in range(n_layer)]), ln_f=nn.LayerNorm(c)))
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as lockstep's gpt
        for name, mod in self.named_modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(mod.weight, 0.0, 0.02)
                if isinstance(mod, nn.Linear) and mod.bias is not None:
                    torch.nn.init.zeros_(mod.bias)
        for name, prm in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(prm, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx):
        t = idx.size(1)
        tr = self.transformer
        x = tr.drop(tr.wte(idx) + tr.wpe(torch.arange(t, device=idx.device)))
        for blk in tr.h:
            x = blk(x)
        return self.lm_head(tr.ln_f(x))


PRESETS = {"gpt-nano": (3, 3, 48), "gpt-micro": (4, 4, 128), "gpt-mini": (6, 6, 192), "gopher-44m": (8, 16, 512),
           "gpt2": (12, 12, 768)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
    ap.add_argument("--model-type", default="gpt-mini", choices=sorted(PRESETS))
    ap.add_argument("--n-layer", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--attention", choices=["mingpt", "sdpa"], default="mingpt")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--order-file", default="")
    ap.add_argument("--eval-at", default="")
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--init-from", default="",
                    help="initial weights from a safetensors file of GPT-2 names (lockstep's model.safetensors)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(1)
    tokens = corpus(args.corpus)
    n_train = int(len(tokens) * (1.0 - 0.1))  # lockstep's data.val_split arithmetic
    train = tokens[:n_train]
    val = tokens[n_train:]
    bs = args.block_size
    windows = (len(train) - 1) // bs
    n_layer, n_head, c = PRESETS[args.model_type]
    if args.n_layer:
        n_layer = args.n_layer
    model = GPT(256, bs, n_layer, n_head, c, args.dropout, args.attention)
    if args.init_from:
        missing, unexpected = model.load_state_dict(load_safetensors(args.init_from), strict=False)
        # lm_head.weight is wte's (tied); every other parameter must come from the file (the causal
        # masks are buffers).
        params = {name for name, _ in model.named_parameters()} - {"lm_head.weight"}
        missing = [k for k in missing if k in params]
        if missing or unexpected:
            raise SystemExit(f"--init-from {args.init_from}: missing {missing}, unexpected {unexpected}")
    model = model.to(dev)
    # minGPT's split: Linear weights decay; biases, LayerNorm and embedding weights (the tied table) do not.
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - {id(model.lm_head.weight)}
    decay = [p for p in model.parameters() if id(p) in linear_weights]
    no_decay = [p for p in model.parameters() if id(p) not in linear_weights]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=5e-4, betas=(0.9, 0.95))
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model)
    if args.compile:
        net = torch.compile(net)
    if args.order_file:
        with open(args.order_file) as f:
            batches = [[int(v) for v in line.split()] for line in f if line.strip()]
    else:
        sampler = torch.utils.data.distributed.DistributedSampler(range(windows), num_replicas=world, rank=rank,
                                                                  seed=1)
        order = list(sampler)
        batches = [order[i:i + args.batch_size] for i in range(0, len(order) - args.batch_size + 1, args.batch_size)]
    eval_at = {int(v) for v in args.eval_at.split(",") if v}

    def validate():
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            n = (len(val) - 1) // bs
            chunk = max(1, 131072 // bs)
            for i in range(0, n, chunk):
                idx = range(i, min(n, i + chunk))
                x = torch.stack([val[j * bs:j * bs + bs] for j in idx]).to(dev)
                y = torch.stack([val[j * bs + 1:j * bs + bs + 1] for j in idx]).to(dev)
                total += F.cross_entropy(model(x).float().view(-1, 256), y.view(-1), reduction="sum").item()
                count += y.numel()
        model.train()
        return total / count

    step, t0, loss = 0, None, None
    for batch in batches:
        starts = torch.tensor(batch) * bs
        x = torch.stack([train[s:s + bs] for s in starts.tolist()]).to(dev)
        y = torch.stack([train[s + 1:s + bs + 1] for s in starts.tolist()]).to(dev)
        if step == args.warmup_steps:
            t0 = time.perf_counter()
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = net(x)
            l = F.cross_entropy(logits.float().view(-1, 256), y.view(-1))
        opt.zero_grad(set_to_none=True)
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = l.item()
        step += 1
        if args.log_every and step % args.log_every == 0 and rank == 0:
            print(f"train step={step} loss={loss:.4f}", flush=True)
        if step in eval_at and rank == 0:
            t_eval = time.perf_counter()
            print(f"val step={step} val_loss={validate():.4f}", flush=True)
            if t0 is not None:
                t0 += time.perf_counter() - t_eval  # tokens/s counts training only
        if step >= args.max_steps:
            break
    dt = time.perf_counter() - t0
    tps = (step - args.warmup_steps) * args.batch_size * bs * world / dt
    if rank == 0:
        print(f"impl=torch version={torch.__version__} attention={args.attention} compile={int(args.compile)} "
              f"world={world} steps={step} tokens_per_second={tps:.1f} loss={loss:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
