"""DeepSpeed twin of bench/zero.bench.sh's `lockstep train` run: the same MLP (Flatten, then --layers
Linear(--hidden) + ReLU, then Linear(--classes); f32), synthetic data of the same shapes (normal inputs
of --in-features, labels from a random linear teacher), micro-batch --micro-batch per rank, Adam
(lr 1e-4, betas (0.9, 0.999), eps 1e-8, no weight decay), ZeRO stage --stage with the same bucket sizes,
--precision fp32 or bf16 (DeepSpeed's "bf16": {"enabled": true}: the module in bf16, f32 master weights;
the inputs cast to bf16, the loss computed in f32) or bf16master (bf16 with bf16_master_weights_and_grads and
bf16_optimizer_states: no f32 copies, the optimizer's states bf16),
through deepspeed.initialize with a DeepSpeed JSON config, on DeepSpeed's CPU accelerator
(DS_ACCELERATOR=cpu) over gloo.
--optimizer config: the config's "optimizer" section (DeepSpeed builds its own Adam: on the CPU
accelerator FusedAdam's CPU build, JIT-compiled C++); --optimizer torch: torch.optim.Adam passed to
deepspeed.initialize (with "zero_allow_untested_optimizer": true).
Start each rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (bench/scripts/peer.sh).
Prints (rank 0) one line:
  impl=deepspeed version=<v> stage=<s> world=<n> params=<P> steps=<n> samples_per_second=<after warm-up,
  all ranks> samples_per_second_all=<all steps> peak_rss_mib=<rank0,rank1,...> start_rss_mib=<each
  rank's RSS before the model is built: torch, DeepSpeed and gloo loaded> loss=<last>
and one `memory rank=<r> ...` line per rank: bytes of the live tensors DeepSpeed holds after the last
backward (before its step), found by walking every live tensor (gc) and sorting their storages into the
module's parameters (stage 3: the rank's partitions), the optimizer's master copies (fp32, or bf16 with
bf16master; ZeRO keeps one even for f32 training), gradients (the .grad of both), the inner optimizer's states, and other
(reduce buckets, flat buffers not reachable from those)."""
import argparse
import json
import gc
import os
import resource
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def mlp(in_features, hidden, layers, classes):
    mods = [nn.Flatten()]
    prev = in_features
    for _ in range(layers):
        mods += [nn.Linear(prev, hidden), nn.ReLU()]
        prev = hidden
    mods.append(nn.Linear(prev, classes))
    return nn.Sequential(*mods)


def synthetic(size, features, classes, seed):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(classes, features, generator=g)
    x = torch.randn(size, features, generator=g)
    return x, (x @ teacher.t()).argmax(dim=1)


def storage_key(t):
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def tensors_in(v, depth=0):
    if isinstance(v, torch.Tensor):
        yield v
    elif depth < 3 and isinstance(v, (list, tuple)):
        for x in v:
            yield from tensors_in(x, depth + 1)
    elif depth < 3 and isinstance(v, dict):
        for x in v.values():
            yield from tensors_in(x, depth + 1)


def tensor_bytes(model, engine, data):
    """Live tensor storages by role, as seen after backward: see the module docstring."""
    zero = engine.optimizer
    inner = zero
    while hasattr(inner, "optimizer") and inner.optimizer is not inner:
        inner = inner.optimizer
    role = {}

    def mark(t, name):
        k = storage_key(t) if isinstance(t, torch.Tensor) else None
        if k and k[0] and k not in role:
            role[k] = name

    for p in model.parameters():
        mark(getattr(p, "ds_tensor", None), "parameters")
        mark(p.data, "parameters")
        mark(p.grad, "gradients")
    for group in inner.param_groups:
        for p in group["params"]:
            mark(p.data, "master")
            mark(p.grad, "gradients")
    for st in inner.state.values():
        for v in st.values():
            mark(v, "optimizer_states")
    for t in data:
        mark(t, "data")
    if zero is not inner:  # ZeRO's own buffers: gradient partitions and reduce buckets, fp32 copies
        for name, v in vars(zero).items():
            kind = "gradients" if "grad" in name else "master" if "fp32" in name else None
            for t in tensors_in(v):
                if os.environ.get("DS_DEBUG_MEMORY"):
                    print("zero tensor", name, t.numel(), t.dtype, flush=True)
                if kind:
                    mark(t, kind)
    totals = {"parameters": 0, "master": 0, "gradients": 0, "optimizer_states": 0, "other": 0, "data": 0}
    seen = set()
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor):
            k = storage_key(o)
            if k and k[0] and k not in seen:
                seen.add(k)
                totals[role.get(k, "other")] += k[1]
    for k, name in role.items():  # storages held only from C++ (no Python tensor object)
        if k not in seen:
            seen.add(k)
            totals[name] += k[1]
    return totals


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in-features", type=int, default=1536)
    ap.add_argument("--hidden", type=int, default=2304)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--data-size", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--stage", type=int, default=0, choices=[0, 1, 2, 3])
    ap.add_argument("--bucket", type=float, default=5e6)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--optimizer", choices=["config", "torch"], default="config")
    ap.add_argument("--stage3-json", default="{}", help="stage 3's zero_optimization keys, as JSON")
    ap.add_argument("--precision", choices=["fp32", "bf16", "bf16master"], default="fp32")
    args = ap.parse_args()

    import deepspeed
    import torch.distributed as dist

    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rss_start = status_kib("VmRSS")  # torch, DeepSpeed and gloo loaded, no model yet
    torch.manual_seed(1)
    adam = {"lr": args.lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    config = {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10**9,
        "zero_optimization": {
            "stage": args.stage,
            "reduce_bucket_size": int(args.bucket),
            "allgather_bucket_size": int(args.bucket),
            **{k: int(v) for k, v in json.loads(args.stage3_json).items()},
        },
        "zero_allow_untested_optimizer": True,
    }
    if args.precision == "bf16":
        config["bf16"] = {"enabled": True}
    if args.precision == "bf16master":
        config["bf16"] = {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    x, y = synthetic(args.data_size, args.in_features, args.classes, 0)
    if args.stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = mlp(args.in_features, args.hidden, args.layers, args.classes)
    else:
        model = mlp(args.in_features, args.hidden, args.layers, args.classes)
    params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    if args.optimizer == "config":
        config["optimizer"] = {"type": "Adam", "params": dict(adam, adam_w_mode=False)}
        opt = None
    else:
        opt = torch.optim.Adam(model.parameters(), **{k: tuple(v) if k == "betas" else v for k, v in adam.items()})
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, model_parameters=model.parameters(),
                                           config=config)
    criterion = nn.CrossEntropyLoss()
    per_rank = args.data_size // world
    t_start = t_warm = time.perf_counter()
    memory = None
    loss = torch.zeros(())
    for step in range(args.steps):
        if step == args.warmup_steps:
            t_warm = time.perf_counter()
        i = (step * args.micro_batch) % (per_rank - args.micro_batch + 1) + rank * per_rank
        xb = x[i:i + args.micro_batch]
        if args.precision != "fp32":
            xb = xb.to(torch.bfloat16)
        loss = criterion(engine(xb).float(), y[i:i + args.micro_batch])
        engine.backward(loss)
        if step == args.steps - 1:
            memory = tensor_bytes(model, engine, (x, y))
            memory.pop("data")
        engine.step()
    t_end = time.perf_counter()
    samples = args.micro_batch * world
    timed = args.steps - args.warmup_steps
    sps = samples * timed / (t_end - t_warm) if timed > 0 else 0.0
    sps_all = samples * args.steps / (t_end - t_start)
    mem = torch.tensor([status_kib("VmHWM"), rss_start] + [memory[k] for k in sorted(memory)], dtype=torch.float64)
    mems = [torch.zeros_like(mem) for _ in range(world)]
    dist.all_gather(mems, mem)
    if rank == 0:
        rss = ",".join(str(int(m[0]) // 1024) for m in mems)
        start = ",".join(str(int(m[1]) // 1024) for m in mems)
        print(f"impl=deepspeed version={deepspeed.__version__} stage={args.stage} precision={args.precision} "
              f"world={world} params={params} "
              f"steps={args.steps} samples_per_second={sps:.2f} samples_per_second_all={sps_all:.2f} "
              f"peak_rss_mib={rss} start_rss_mib={start} loss={loss.item():.4f}", flush=True)
        for r, m in enumerate(mems):
            fields = " ".join(f"{k}={int(v)}" for k, v in zip(sorted(memory), m[2:].tolist()))
            print(f"memory rank={r} {fields}", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
