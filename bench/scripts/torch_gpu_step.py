"""PyTorch's side of bench/gpu.bench.sh: training steps per second on one GPU, with SGD and cross
entropy on fixed random data, for the seed CNN (batch 32 and 128), the CIFAR ResNet-18 (batch 256)
and ResNet-50 at ImageNet's shape (224x224, 1000 classes, batch 128; torchvision's when it imports,
else the same network defined here), both ResNets channels-last; f32 and bf16 autocast; eager,
torch.compile (default mode) and torch.compile(mode="reduce-overhead") (CUDA graphs). The same
models, data, loss and SGD as lockstep's bench/gpu_step.cpp, and the same step counts: ResNet-18
times max(steps // 5, 20) steps after 20 warmup, ResNet-50 max(steps // 10, 20) after 10.

Cases run cheapest first: every eager case, then the compiled ones model by model in --models
order (per dtype, the modes in --modes order). A case that throws prints a `failed:` line (its
traceback goes to stderr) and the next one runs; with --budget-s, a case that would start after that
many seconds prints a `skipped:` line instead. The first line names the versions (torch, GPU,
driver, CUDA, cuDNN, torchvision); then one line per case: impl=... model=... samples_per_s=..."""
import argparse
import time

import torch
import torch.nn.functional as F

import gpu_bench
from resnets import TORCHVISION, make_resnet
from seed_cnn import Net

# model: (batch, one sample's shape, classes, channels_last, steps(steps), warmup(warmup))
MODELS = {
    "seed_cnn": (32, (1, 28, 28), 10, False, lambda s: s, lambda w: w),
    "resnet18_cifar": (256, (3, 32, 32), 10, True, lambda s: max(s // 5, 20), lambda w: 20),
    "resnet50": (128, (3, 224, 224), 1000, True, lambda s: max(s // 10, 20), lambda w: 10),
}


def make_model(name):
    if name == "seed_cnn":
        return Net()
    return make_resnet(name)


def batches(name):
    return [32, 128] if name == "seed_cnn" else [MODELS[name][0]]


def measure(model_name, batch, dtype, mode, steps, warmup):
    _, item, classes, channels_last, _, _ = MODELS[model_name]
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = make_model(model_name).to(dev)
    x = torch.rand(batch, *item, device=dev)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    y = torch.arange(batch, device=dev) % classes
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    sec, loss = gpu_bench.time_steps(step if mode == "eager" else gpu_bench.compiled(step, mode), warmup, steps)
    return sec, loss.item()


def cases(models, modes, dtypes, steps, warmup):
    """(model, batch, dtype, mode, steps, warmup): the eager cases, then the compiled ones."""
    def of(model, dtype, mode):
        s, w = MODELS[model][4](steps), MODELS[model][5](warmup)
        return [(model, b, dtype, mode, s, w) for b in batches(model)]

    return gpu_bench.eager_first(models, modes, dtypes, of)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpu_bench.add_case_args(ap, MODELS, 500, "timed steps per seed CNN case (ResNets: fewer)",
                            50, "untimed steps first (seed CNN; ResNets: 20 and 10)")
    args = ap.parse_args()
    models, modes, dtypes = gpu_bench.case_lists(ap, args, MODELS)
    start = time.monotonic()
    # PyTorch's usual training setting: cuDNN times its algorithms, nondeterministic ones allowed.
    torch.backends.cudnn.benchmark = True
    gpu_bench.print_versions(f"torchvision={TORCHVISION}")

    def case(model, batch, dtype, mode, steps, warmup):
        head = (f"impl=torch-{mode} model={model} batch={batch} dtype={dtype} cudnn=benchmark "
                f"deterministic={int(torch.backends.cudnn.deterministic)}")

        def run():
            sec, loss = measure(model, batch, dtype, mode, steps, warmup)
            return f"step_us={1e6 * sec / steps:.1f} samples_per_s={batch * steps / sec:.0f} loss={loss:.4f}"

        return head, run

    todo = [case(*c) for c in cases(models, modes, dtypes, args.steps, args.warmup)]
    gpu_bench.run_cases(todo, args.budget_s, start)


if __name__ == "__main__":
    main()
