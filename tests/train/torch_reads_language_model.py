"""Reads the language models `lockstep train` wrote into PyTorch twins of their originals and checks
lockstep's own validation loss.

  torch_reads_language_model.py RUN_DIR TOKEN_DIR

RUN_DIR holds model.safetensors and summary.json of a gpt or llama run on TOKEN_DIR's val.bin
(uint16 byte tokens, block_size from the run's config). The weights are opened with PyPI's
`safetensors` and loaded strictly (every name and shape) into the twin: minGPT's GPT with GPT-2's
names and the output layer tied to wte, or Hugging Face's LlamaForCausalLM written out (RMSNorm,
rotate-half rotary embeddings, repeat_kv grouped-query attention, SwiGLU). The twin evaluates the
validation windows as train::evaluate does (windows tiling val.bin, cross-entropy summed over every
position, divided by the number of positions) and must match summary.json's val_loss to 1e-4
relative; an MLP weight scaled by 1.5 must not match (the control). Last line "torch_reads_language_model: OK".
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

RTOL = 1e-4


class GptBlock(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.attn = nn.ModuleDict(dict(c_attn=nn.Linear(c, 3 * c), c_proj=nn.Linear(c, c)))
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(c, 4 * c), c_proj=nn.Linear(4 * c, c)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.h)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.attn.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, m, vocab):
        super().__init__()
        c = m["n_embd"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(m["block_size"], c),
            h=nn.ModuleList([GptBlock(c, m["n_head"]) for _ in range(m["n_layer"])]), ln_f=nn.LayerNorm(c)))

    def forward(self, idx):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1]))
        for blk in tr.h:
            x = blk(x)
        return tr.ln_f(x) @ tr.wte.weight.T  # tied output layer


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(c)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, m):
        super().__init__()
        c, h, kv, inter = m["n_embd"], m["n_head"], m["n_kv_head"], m["intermediate_size"]
        d = c // h
        self.h, self.kv, self.d = h, kv, d
        self.self_attn = nn.ModuleDict(dict(q_proj=nn.Linear(c, h * d, bias=False), k_proj=nn.Linear(c, kv * d, bias=False),
                                            v_proj=nn.Linear(c, kv * d, bias=False), o_proj=nn.Linear(h * d, c, bias=False)))
        self.mlp = nn.ModuleDict(dict(gate_proj=nn.Linear(c, inter, bias=False), up_proj=nn.Linear(c, inter, bias=False),
                                      down_proj=nn.Linear(inter, c, bias=False)))
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(c, m["eps"]), RMSNorm(c, m["eps"])

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        a = self.self_attn
        n = self.input_layernorm(x)
        q = a.q_proj(n).view(b, t, self.h, self.d).transpose(1, 2)
        k = a.k_proj(n).view(b, t, self.kv, self.d).transpose(1, 2)
        v = a.v_proj(n).view(b, t, self.kv, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(self.h // self.kv, dim=1) for z in (k, v))  # HF's repeat_kv
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + a.o_proj((att @ v).transpose(1, 2).reshape(b, t, c))
        m = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(m)) * self.mlp.up_proj(m))


class Llama(nn.Module):
    def __init__(self, m, vocab):
        super().__init__()
        c = m["n_embd"]
        self.theta, self.d = m["theta"], c // m["n_head"]
        self.model = nn.ModuleDict(dict(embed_tokens=nn.Embedding(vocab, c),
                                        layers=nn.ModuleList([LlamaBlock(m) for _ in range(m["n_layer"])]),
                                        norm=RMSNorm(c, m["eps"])))
        self.lm_head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.d, 2, dtype=torch.float64) / self.d))
        freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().float(), emb.sin().float()
        x = self.model.embed_tokens(idx)
        for blk in self.model.layers:
            x = blk(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def val_loss(model, val, block):
    windows = (len(val) - 1) // block
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, windows, 64):
            idx = [w * block for w in range(s, min(windows, s + 64))]
            x = torch.stack([val[i:i + block] for i in idx])
            y = torch.stack([val[i + 1:i + block + 1] for i in idx])
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    return total / count


def main():
    run, tok = sys.argv[1], sys.argv[2]
    summary = json.load(open(f"{run}/summary.json"))
    run_info = json.load(open(f"{run}/run.json"))
    cfg = run_info["config"]["model"]
    weights = load_file(f"{run}/model.safetensors")
    vocab = json.load(open(f"{tok}/meta.json"))["vocab_size"]
    val = torch.from_numpy(np.fromfile(f"{tok}/val.bin", dtype=np.uint16).astype(np.int64))
    block = cfg["block_size"]
    if cfg["name"] == "gpt":
        model = Gpt({"n_embd": cfg["n_embd"], "n_head": cfg["n_head"], "n_layer": cfg["n_layer"], "block_size": block}, vocab)
        if os.path.exists(f"{run}/config.json"):
            sys.exit("torch_reads_language_model: FAIL: a gpt run wrote a Hugging Face config.json (its weights are not GPT2's Conv1D layout)")
    else:
        # The twin is built from the Hugging Face config.json the run wrote beside its weights (what
        # LlamaForCausalLM.from_pretrained reads), so a wrong size, eps or theta there fails the loss.
        hf = json.load(open(f"{run}/config.json"))
        if hf["model_type"] != "llama" or hf["architectures"] != ["LlamaForCausalLM"] or hf["tie_word_embeddings"]:
            sys.exit(f"torch_reads_language_model: FAIL: config.json is not an untied LlamaForCausalLM's: {hf}")
        if hf["vocab_size"] != vocab or hf["max_position_embeddings"] != block:
            sys.exit(f"torch_reads_language_model: FAIL: config.json's vocab or positions: {hf}")
        model = Llama({"n_embd": hf["hidden_size"], "n_head": hf["num_attention_heads"],
                       "n_kv_head": hf["num_key_value_heads"], "n_layer": hf["num_hidden_layers"],
                       "intermediate_size": hf["intermediate_size"], "eps": hf["rms_norm_eps"],
                       "theta": hf["rope_theta"]}, vocab)
    model.load_state_dict(weights, strict=True)
    model.eval()
    ours, theirs = summary["val_loss"], val_loss(model, val, block)
    print(f"{cfg['name']}: lockstep val_loss {ours:.6f}, torch twin {theirs:.6f}")
    if abs(ours - theirs) > RTOL * abs(theirs):
        sys.exit(f"torch_reads_language_model: FAIL: {cfg['name']} val_loss {ours} vs torch {theirs}")
    name = next(k for k in weights if k.endswith("mlp.c_fc.weight") or k.endswith("mlp.up_proj.weight"))
    with torch.no_grad():
        model.state_dict()[name].mul_(1.5)  # the whole matrix: one element may sit behind a closed gate
    nudged = val_loss(model, val, block)
    if abs(ours - nudged) <= RTOL * abs(nudged):
        sys.exit(f"torch_reads_language_model: FAIL: the control passed (nudged {name}: {nudged})")
    print(f"torch_reads_language_model: OK {cfg['name']} ({len(weights)} tensors)")


if __name__ == "__main__":
    main()
