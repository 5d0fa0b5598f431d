#!/usr/bin/env python3
"""1,000 hostile connections against a running job's store leave its result bitwise unchanged.

Trains the same small model twice with `lockstep run --nproc-per-node 2 --join-token T ...
lockstep train`, the second time while CONNS concurrent connections hammer the agent's store port
with random bytes, well-formed requests sent without the handshake, wrong HMAC proofs and idle
sockets, and compares the two model.safetensors byte for byte (sha256).

usage: bench/store_flood.py BUILD_DIR [CONNS=1000]
"""
import hashlib
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import asyncio
import time

build = sys.argv[1]
conns = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
lockstep = os.path.join(build, "lockstep")
token = "flood-bench-secret-0123456789abcdef"

CONFIG = """train_batch_size: 64
optimizer: {type: SGD, params: {lr: 0.05}}
model: {name: mlp}
data: {dataset: synthetic, size: 8192, test_size: 256, input_shape: [64]}
epochs: 6
seed: 3
steps_per_print: 1000
backend: gloo
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def frame(body):
    return struct.pack("<I", len(body)) + body


async def hostile(port, stop, counts, seed):
    rng = random.Random(seed)
    idle = []
    while not stop.is_set():
        kind = rng.randrange(4)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        except (OSError, asyncio.TimeoutError):
            counts["connect_failed"] += 1
            await asyncio.sleep(0.05)
            continue
        counts["connections"] += 1
        try:
            if kind == 0:  # garbage
                writer.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000))))
                await writer.drain()
            elif kind == 1:  # set without the handshake: cmd 1, key, value
                key = b"lockstep/run/flood/round0/node/1"
                writer.write(frame(b"\x01" + struct.pack("<I", len(key)) + key + struct.pack("<I", 5) + b"rogue"))
                await asyncio.wait_for(reader.read(4096), 2)
            elif kind == 2:  # challenge, then a wrong proof
                writer.write(frame(b"\x09"))
                await asyncio.wait_for(reader.read(4096), 2)
                writer.write(frame(b"\x0a" + struct.pack("<I", 32) + os.urandom(32)))
                await asyncio.wait_for(reader.read(4096), 2)
            else:  # connect and say nothing (held until the server drops it)
                idle.append(writer)
                if len(idle) > 4:
                    idle.pop(0).close()
                continue
        except (OSError, asyncio.TimeoutError):
            pass
        writer.close()
    for w in idle:
        w.close()


async def flood_until(port, proc, counts):
    """CONNS concurrent hostile clients until the job's process ends."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(hostile(port, stop, counts, i)) for i in range(conns)]
    while proc.poll() is None:
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


def train(out, flood):
    cfg = os.path.join(out, "config.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    port = free_port()
    cmd = [lockstep, "run", "--nproc-per-node", "2", "--master-port", str(port), "--rdzv-id", "flood",
           "--join-token", token, lockstep, "train", cfg, "--output-dir", os.path.join(out, "run")]
    counts = {"connections": 0, "connect_failed": 0}
    start = time.time()
    log = open(os.path.join(out, "log.txt"), "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    if flood:
        time.sleep(0.3)  # the agent's store is up
        asyncio.run(flood_until(port, proc, counts))
    proc.wait()
    log.seek(0)
    output = log.read()
    took = time.time() - start
    if proc.returncode != 0:
        print(output)
        sys.exit(f"training failed with exit {proc.returncode}")
    digest = hashlib.sha256(open(os.path.join(out, "run", "model.safetensors"), "rb").read()).hexdigest()
    refused = sum(1 for line in output.splitlines() if "refused client" in line)
    return digest, took, counts, refused, output


with tempfile.TemporaryDirectory() as d:
    os.makedirs(os.path.join(d, "quiet"))
    os.makedirs(os.path.join(d, "flood"))
    h0, t0, _, _, _ = train(os.path.join(d, "quiet"), False)
    h1, t1, counts, refused, output = train(os.path.join(d, "flood"), True)
    print(f"quiet run:   model sha256 {h0}, {t0:.1f} s")
    print(f"flooded run: model sha256 {h1}, {t1:.1f} s, {conns} concurrent hostile clients made "
          f"{counts['connections']} connections ({counts['connect_failed']} connects failed); "
          f"refusal log lines: {refused}")
    last = [line for line in output.splitlines() if "refused so far" in line][-1:]
    if last:
        print("last refusal line:", last[0])
    print("bitwise identical" if h0 == h1 else "DIFFERENT")
    sys.exit(0 if h0 == h1 else 1)
