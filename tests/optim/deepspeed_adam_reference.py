"""Generates the DeepSpeed Adam values in optimizer_test.cpp: DeepSpeedCPUAdam (the Adam that
DeepSpeed runs under ZeRO-Offload, with FusedAdam's options) with bias_correction=False.

Run with PyPI's torch and deepspeed (DeepSpeed builds its cpu_adam op on first use; no GPU needed):
  DS_ACCELERATOR=cpu build/bench-venv/bin/python tests/optim/deepspeed_adam_reference.py
Values in the test: torch 2.15.0 and deepspeed 0.19.8 from PyPI. The problem is torch_reference.py's:
two parameters, loss sum(w * (p - t)^2), five steps, float32 (DeepSpeedCPUAdam has no float64).
"""
import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam

P0, P1 = [0.5, -1.0, 2.0, 0.25], [0.1, -0.3, 0.7]
T0, T1 = [1.0, 0.0, -1.0, 0.5], [0.2, 0.2, -0.4]
W0, W1 = [1.0, 2.0, 0.5, 3.0], [1.5, 0.25, 1.0]


def run(**kw):
    p0 = torch.tensor(P0).reshape(2, 2).requires_grad_()
    p1 = torch.tensor(P1).requires_grad_()
    opt = DeepSpeedCPUAdam([p0, p1], **kw)
    for _ in range(5):
        for p, t, w in ((p0, T0, W0), (p1, T1, W1)):
            v = p.detach().double().reshape(-1)  # the gradient in double, cast: as the C++ test does
            g = 2 * torch.tensor(w, dtype=torch.float64) * (v - torch.tensor(t, dtype=torch.float64))
            p.grad = g.float().reshape(p.shape)
        opt.step()
    return torch.cat([p0.detach().reshape(-1), p1.detach()]).tolist()


def fmt(v):
    return "{" + ", ".join(repr(float(x)) for x in v) + "}"


print("// L2 (adamw_mode=False):",
      fmt(run(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, bias_correction=False, adamw_mode=False)))
print("// AdamW:", fmt(run(lr=0.05, weight_decay=0.1, bias_correction=False, adamw_mode=True)))
