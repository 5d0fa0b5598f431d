"""The peers of bench_optimizer_step --numel: one Adam step over one flat f32 parameter of NUMEL
elements on the CPU, as ZeRO-Offload's host step runs it (bench/offload_step.bench.sh).

  python cpu_adam_peer.py --numel 33554432 --steps 10 --threads 2

Prints one line per optimizer, in bench_optimizer_step's format:
  optimizer=deepspeed_cpu_adam  DeepSpeedCPUAdam (DeepSpeed's ZeRO-Offload optimizer: its C++ Adam,
                                JIT-compiled for this CPU's SIMD width on first use), Adam mode
                                (adamw_mode=False; weight decay 0, so AdamW's update is the same)
  optimizer=torch_adam_fused    torch.optim.Adam(fused=True) (torch's fused CPU kernel)
  optimizer=torch_adam          torch.optim.Adam's default implementation
A peer that fails prints optimizer=NAME error="..." and the others still run.
"""
import argparse
import os
import time

import torch


def time_steps(opt, steps):
    opt.step()  # states allocated, first touch
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - t0) / steps * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    def param():
        p = torch.full((a.numel,), 0.5)
        p.grad = torch.full((a.numel,), 1e-3)
        return p

    def report(name, make):
        try:
            p = param()
            ms = time_steps(make([p]), a.steps)
            print(f"optimizer={name} numel={a.numel} step_ms={ms:.2f} threads={a.threads} "
                  f"traffic_gb_per_s={28.0 * a.numel / ms / 1e6:.1f}", flush=True)
        except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f'optimizer={name} error="{msg[:200]}"', flush=True)

    os.environ.setdefault("DS_ACCELERATOR", "cpu")

    def deepspeed_adam(params):
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(params, lr=1e-3, adamw_mode=False)

    report("deepspeed_cpu_adam", deepspeed_adam)
    report("torch_adam_fused", lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True))
    report("torch_adam", lambda ps: torch.optim.Adam(ps, lr=1e-3))


if __name__ == "__main__":
    main()
