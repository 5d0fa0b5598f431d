"""PyTorch's side of bench/gpu.bench.sh: training steps per second on one GPU for the seed CNN
(batch 32 and 128, f32 and bf16 autocast; eager, torch.compile default and reduce-overhead) and the
CIFAR ResNet-18 (batch 256, channels-last, eager). Same model, data, loss and SGD as lockstep's
bench/gpu_step.cpp. Prints one line per case: impl=... model=... batch=... samples_per_s=..."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from seed_cnn import Net


class BasicBlock(nn.Module):
    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18Cifar(nn.Module):
    """lockstep's resnet18_cifar (lockstep/nn/models/resnet.h): 3x3 stem, no max-pool, torchvision names."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inp = [], 64
        for planes, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers.append(nn.Sequential(BasicBlock(inp, planes, stride), BasicBlock(planes, planes, 1)))
            inp = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def measure(model_name, batch, dtype, mode, steps, warmup):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    if model_name == "seed_cnn":
        net, x = Net().to(dev), torch.rand(batch, 1, 28, 28, device=dev)
    else:
        net = ResNet18Cifar().to(dev).to(memory_format=torch.channels_last)
        x = torch.rand(batch, 3, 32, 32, device=dev).to(memory_format=torch.channels_last)
    y = torch.arange(batch, device=dev) % 10
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    fn = step
    if mode != "eager":
        fn = torch.compile(step, mode=None if mode == "compile" else mode)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = fn()
    torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    print(f"impl=torch-{mode} model={model_name} batch={batch} dtype={dtype} step_us={1e6 * sec / steps:.1f} "
          f"samples_per_s={batch * steps / sec:.0f} loss={loss.item():.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--modes", default="eager,compile,reduce-overhead")
    ap.add_argument("--resnet", type=int, default=1)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"torch={torch.__version__} gpu={torch.cuda.get_device_name()} cudnn={torch.backends.cudnn.version()}",
          flush=True)
    for mode in args.modes.split(","):
        for dtype in ["f32", "bf16"]:
            for batch in [32, 128]:
                try:
                    measure("seed_cnn", batch, dtype, mode, args.steps, args.warmup)
                except Exception as e:  # torch.compile may not work there: say so and go on
                    print(f"impl=torch-{mode} model=seed_cnn batch={batch} dtype={dtype} failed: {e!r}"[:400])
    if args.resnet:
        for dtype in ["f32", "bf16"]:
            measure("resnet18_cifar", 256, dtype, "eager", max(args.steps // 5, 50), 20)


if __name__ == "__main__":
    main()
