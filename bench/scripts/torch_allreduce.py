#!/usr/bin/python3
"""torch.distributed allreduce benchmark, printing the same lines as `lockstep bench allreduce`.

Starts --nproc local ranks itself (Debian's torchrun breaks on Python 3.11): each rank gets
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT and runs init_process_group(backend).

    python3 bench/scripts/torch_allreduce.py --backend gloo --nproc 2 --sizes 4096,67108864

Rank 0 prints per size: bytes=<n> time_us=<t> algbw_GBps=<a> busbw_GBps=<b>
(busbw = algbw * 2(n-1)/n, as nccl-tests defines it; time is the slowest rank's mean).
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def iters_for(nbytes):
    return max(20, min(2000, (512 << 20) // max(nbytes, 1)))


def worker(args):
    import torch
    import torch.distributed as dist

    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    for nbytes in args.sizes:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        dist.all_reduce(t)
        assert t[0].item() == n, "wrong allreduce result"
        iters = args.iters or iters_for(nbytes)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        us = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
        dist.all_reduce(us, op=dist.ReduceOp.MAX)
        if rank == 0:
            us = us.item()
            algbw = nbytes / (us * 1e-6) / 1e9
            busbw = algbw * 2 * (n - 1) / n
            print(f"bytes={nbytes} time_us={us:.2f} algbw_GBps={algbw:.3f} busbw_GBps={busbw:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes", default="4096,67108864")
    p.add_argument("--iters", type=int, default=0, help="timed iterations per size (0: about 0.5 GB)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        worker(args)
        return 0
    port = str(free_port())
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--backend", args.backend,
                                       "--sizes", ",".join(map(str, args.sizes)), "--iters", str(args.iters),
                                       "--warmup", str(args.warmup)], env=env))
    codes = [pr.wait() for pr in procs]
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
