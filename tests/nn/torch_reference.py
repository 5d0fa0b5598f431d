"""Expected values for tests/nn/*_test.cpp, computed with torch 1.13.

Run: /usr/bin/python3 tests/nn/torch_reference.py
Parameters are set by a formula instead of a random draw so both sides agree without sharing a
generator: the k-th parameter (registration order), element j (row-major) = s * sin(2.3 * j + k) with
s = sqrt(6 / fan_in) = sqrt(6 * size(0) / numel) for weights of 2+ dims and 0.01 for 1-d ones; BatchNorm weights get 1 + that;
running stats stay at their defaults. The input element j = cos(0.11 * j) + 0.5 * sin(1.3 * j).
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCnn(nn.Module):
    def __init__(self, cin, flat):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 64, 3)
        self.fc1 = nn.Linear(flat, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet18Cifar(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, planes in enumerate((64, 128, 256, 512)):
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, planes, 1 if i == 0 else 2), BasicBlock(planes, planes, 1)))
            cin = planes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def set_params(model):
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            j = torch.arange(p.numel(), dtype=torch.float64)
            scale = math.sqrt(6.0 * p.shape[0] / p.numel()) if p.dim() >= 2 else 0.01
            v = scale * torch.sin(2.3 * j + k)
            if ".bn" in name or name.startswith("bn") or "downsample.1" in name:
                if name.endswith("weight"):
                    v = v + 1
            p.copy_(v.reshape(p.shape))


def inp(shape):
    n = math.prod(shape)
    j = torch.arange(n, dtype=torch.float64)
    return (torch.cos(0.11 * j) + 0.5 * torch.sin(1.3 * j)).reshape(shape).float()


def fmt(t):
    return "{" + ", ".join(f"{float(v)!r}" for v in t.flatten().tolist()) + "}"


torch.manual_seed(0)
m = SmallCnn(1, 576)
print("mnist_cnn params", sum(p.numel() for p in m.parameters()), [n for n, _ in m.named_parameters()])
set_params(m)
print("// mnist_cnn logits [2, 10]:", fmt(m(inp((2, 1, 28, 28)))))
c = SmallCnn(3, 1024)
print("cifar_cnn params", sum(p.numel() for p in c.parameters()))
set_params(c)
print("// cifar_cnn logits [2, 10]:", fmt(c(inp((2, 3, 32, 32)))))
r = ResNet18Cifar()
print("resnet18_cifar params", sum(p.numel() for p in r.parameters()), len(r.state_dict()))
set_params(r)
r.eval()
print("// resnet18_cifar eval logits [2, 10]:", fmt(r(inp((2, 3, 32, 32)))))
r.train()
print("// resnet18_cifar train logits [2, 10]:", fmt(r(inp((2, 3, 32, 32)))))
print("// resnet18 layer1.0.bn1.running_mean[:4] after one train forward:", fmt(r.layer1[0].bn1.running_mean[:4]))
print("// resnet18 first 12 state keys:", list(r.state_dict().keys())[:12])

# Losses on fixed logits.
logits = torch.tensor([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0], [0.3, 0.3, 0.3], [2.0, -2.0, 0.0]], dtype=torch.float64)
target = torch.tensor([1, 2, 0, 1])
print("// cross_entropy mean:", float(F.cross_entropy(logits, target)))
print("// cross_entropy ls=0.1 sum:", float(F.cross_entropy(logits, target, label_smoothing=0.1, reduction="sum")))
print("// nll(log_softmax) ignore_index=2:", float(F.nll_loss(F.log_softmax(logits, 1), target, ignore_index=2)))
print("// mse:", float(F.mse_loss(logits, torch.ones_like(logits) * 0.5)))
