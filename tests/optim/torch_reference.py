"""Generates the expected values in optimizer_test.cpp and scheduler_test.cpp with torch 1.13
(the bf16 lines with torch >= 2.4).

Run: /usr/bin/python3 tests/optim/torch_reference.py  (prints C++ initialisers).
The problem: two parameters, p0 [2, 2] and p1 [3], loss sum(w * (p - t)^2), so the gradient is
2 * w * (p - t); five optimizer steps; float64 (and float32 for one config).
"""
import math
import torch

P0 = [0.5, -1.0, 2.0, 0.25]
P1 = [0.1, -0.3, 0.7]
T0 = [1.0, 0.0, -1.0, 0.5]
T1 = [0.2, 0.2, -0.4]
W0 = [1.0, 2.0, 0.5, 3.0]
W1 = [1.5, 0.25, 1.0]
STEPS = 5

CONFIGS = {
    "sgd_plain": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "adam": (torch.optim.Adam, dict(lr=0.1)),
    "adam_wd_amsgrad": (torch.optim.Adam, dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.1)),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
}


def run(cls, kw, dtype, two_groups=False):
    p0 = torch.tensor(P0, dtype=dtype).reshape(2, 2).requires_grad_()
    p1 = torch.tensor(P1, dtype=dtype).requires_grad_()
    if two_groups:
        opt = cls([{"params": [p0]}, {"params": [p1], "lr": kw["lr"] / 2}], **kw)
    else:
        opt = cls([p0, p1], **kw)
    for _ in range(STEPS):
        with torch.no_grad():
            for p, t, w in ((p0, T0, W0), (p1, T1, W1)):
                t = torch.tensor(t, dtype=dtype).reshape(p.shape)
                w = torch.tensor(w, dtype=dtype).reshape(p.shape)
                p.grad = 2 * w * (p - t)
        opt.step()
    return p0.detach().flatten().tolist() + p1.detach().tolist()


def fmt(vals):
    return "{" + ", ".join(repr(float(v)) for v in vals) + "}"


for name, (cls, kw) in CONFIGS.items():
    print(f'  {{"{name}", {fmt(run(cls, kw, torch.float64))}}},')
print("// sgd_momentum two groups f64:", fmt(run(*CONFIGS["sgd_momentum"], torch.float64, two_groups=True)))
print("// adam f32:", fmt(run(*CONFIGS["adam"], torch.float32)))
print("// adamw_amsgrad f32:", fmt(run(*CONFIGS["adamw_amsgrad"], torch.float32)))


# bf16 parameters with torch's fused (f32 arithmetic, bf16 states) AdamW / Adam, the gradients
# computed in float64 and cast, as optimizer_test.cpp's Problem does. Needs torch >= 2.4 (fused
# optimizers on a CPU).
def run_bf16(cls, kw):
    p0 = torch.tensor(P0, dtype=torch.float64).to(torch.bfloat16).reshape(2, 2).requires_grad_()
    p1 = torch.tensor(P1, dtype=torch.float64).to(torch.bfloat16).requires_grad_()
    opt = cls([p0, p1], **kw, fused=True)
    for _ in range(STEPS):
        with torch.no_grad():
            for p, t, w in ((p0, T0, W0), (p1, T1, W1)):
                t = torch.tensor(t, dtype=torch.float64).reshape(p.shape)
                w = torch.tensor(w, dtype=torch.float64).reshape(p.shape)
                p.grad = (2 * w * (p.double() - t)).to(torch.bfloat16)
        opt.step()
    return p0.detach().double().flatten().tolist() + p1.detach().double().tolist()


for name in ("adamw_amsgrad", "adam"):
    print(f"// {name} bf16 fused:", fmt(run_bf16(*CONFIGS[name])))

# Schedulers: lr at epochs 0..11 (the value after construction, then after each step()).
def sched(make, n=12, lr=0.1):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr)
    s = make(opt)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(n - 1):
        opt.step()
        s.step()
        out.append(opt.param_groups[0]["lr"])
    return out

print("// StepLR(3, 0.5):", fmt(sched(lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5))))
print("// MultiStepLR([2, 5, 9], 0.1):", fmt(sched(lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5, 9], 0.1))))
print("// CosineAnnealingLR(10, 0.001):", fmt(sched(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, 0.001))))

# clip_grad_norm_ on the gradients at the initial point.
for norm_type in (2.0, 1.0, math.inf):
    p0 = torch.tensor(P0, dtype=torch.float64).reshape(2, 2).requires_grad_()
    p1 = torch.tensor(P1, dtype=torch.float64).requires_grad_()
    for p, t, w in ((p0, T0, W0), (p1, T1, W1)):
        p.grad = 2 * torch.tensor(w, dtype=torch.float64).reshape(p.shape) * (p.detach() - torch.tensor(t, dtype=torch.float64).reshape(p.shape))
    total = torch.nn.utils.clip_grad_norm_([p0, p1], 1.0, norm_type=norm_type)
    print(f"// clip norm_type={norm_type}: total={float(total)!r} grads=", fmt(p0.grad.flatten().tolist() + p1.grad.tolist()))

# DeepSpeed is not installed here: a transcription of deepspeed/runtime/lr_schedules.py's
# WarmupLR/WarmupDecayLR (get_lr/_get_gamma), stepped like DeepSpeed (step() then read lr).
class DsWarmupLR:
    def __init__(self, min_lr, max_lr, n, typ, total=None):
        self.min_lr, self.delta = min_lr, max_lr - min_lr
        self.n = max(2, n)
        self.typ = typ
        self.inv = 1.0 / math.log(self.n)
        self.total = total
        self.it = -1

    def gamma(self):
        if self.it < self.n:
            if self.typ == "log":
                return self.inv * math.log(self.it + 1)
            return self.it / self.n
        if self.total is None:
            return 1.0
        return max(0.0, float(self.total - self.it) / float(max(1.0, self.total - self.n)))

    def step(self):
        self.it += 1
        return self.min_lr + self.delta * self.gamma()

for args in ((0.001, 0.1, 5, "log"), (0.0, 0.1, 5, "linear"), (0.001, 0.1, 4, "log", 10), (0.0, 0.1, 4, "linear", 10), (0.0, 0.1, 1, "linear")):
    s = DsWarmupLR(*args)
    print(f"// DeepSpeed {args}:", fmt([s.step() for _ in range(12)]))
