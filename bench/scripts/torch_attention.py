"""PyTorch's scaled_dot_product_attention forward + backward on one GPU, the peer of
`bench_attention --device cuda` (bench/gpu_attention.bench.sh): one line per backend and shape with
the time per step and the peak memory allocated during it (torch.cuda.max_memory_allocated over
the step, from the inputs' level), in the key=value form of bench_attention's lines.

  python3 torch_attention.py --batch 16 --heads 12 --dim 64 --seqs 1024 --dtype bf16 --causal \
      --backends flash,cudnn,efficient --steps 20
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seqs", default="1024")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backends", default="flash,cudnn,efficient")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    print(f"torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} "
          f"gpu={torch.cuda.get_device_name(0).replace(' ', '_')}", flush=True)
    for name in a.backends.split(","):
        if name not in BACKENDS:
            sys.exit(f"torch_attention.py: unknown backend '{name}' (known: {', '.join(BACKENDS)})")
    for seq in (int(s) for s in a.seqs.split(",")):
        for name in a.backends.split(","):
            head = (f"impl=torch-{name} device=cuda dtype={a.dtype} B={a.batch} H={a.heads} T={seq} "
                    f"D={a.dim} causal={int(a.causal)}")
            torch.cuda.empty_cache()
            shape = (a.batch, a.heads, seq, a.dim)
            q, k, v, g = (torch.empty(shape, device="cuda", dtype=dtype).uniform_(-1, 1) for _ in range(4))

            def step():
                qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                with sdpa_kernel([BACKENDS[name]]):
                    y = F.scaled_dot_product_attention(qq, kk, vv, is_causal=a.causal)
                y.backward(g)
                return qq.grad

            try:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                step()
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - before
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    step()
                torch.cuda.synchronize()
                ms = 1e3 * (time.perf_counter() - t0) / a.steps
            except Exception as e:  # a backend that does not take the shape: say so, go on
                print(f"{head} failed: {(str(e).splitlines() or [type(e).__name__])[0][:160]}", flush=True)
                continue
            print(f"{head} fwd_bwd_ms={ms:.3f} peak_bytes={peak}", flush=True)


if __name__ == "__main__":
    main()
