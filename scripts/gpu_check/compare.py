#!/usr/bin/env python3
"""Compares two model.safetensors files written by `lockstep train`, tensor by tensor.

    compare.py A B          prints: max_abs=... max_ref=... rel=... bitwise=yes|no tensors=N

rel is the largest |a - b| over all elements divided by the largest |b| (the measure of
tests/train/train_cli.h's safetensorsRelDiff); bitwise says whether every tensor's bytes are equal.
Reads the format itself (8-byte little-endian header length, JSON header, raw data); views the bytes
as numbers with PyTorch where it is installed (the GPU machine), else with the standard library.
"""
import array
import json
import struct
import sys

try:
    import torch
except ImportError:
    torch = None


def values(dtype, raw):
    """The elements of raw (little-endian) as a list of floats, or a float64 torch tensor."""
    if torch is not None:
        kinds = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
                 "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
        return torch.frombuffer(bytearray(raw), dtype=kinds[dtype]).double()
    if dtype == "BF16":
        half = array.array("H", raw)
        return list(array.array("f", array.array("I", (h << 16 for h in half)).tobytes()))
    if dtype == "F16":
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    codes = {"F64": "d", "F32": "f", "I64": "q", "I32": "i", "U8": "B"}
    return [float(v) for v in array.array(codes[dtype], raw)]


def maxAbsDiff(ta, tb):
    if torch is not None:
        return (ta - tb).abs().max().item(), tb.abs().max().item()
    d = max((abs(x - y) if x == x and y == y else float("nan") for x, y in zip(ta, tb)), default=0.0)
    return d, max((abs(y) for y in tb), default=0.0)


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[lo:hi])
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if sorted(a) != sorted(b):
        print(f"error: tensor names differ: {sorted(set(a) ^ set(b))[:5]}")
        return 2
    max_abs, max_ref, bitwise, worst = 0.0, 0.0, True, ""
    for name in sorted(b):
        da, sa, ba = a[name]
        db, sb, bb = b[name]
        # A run with 16-bit master-weight parameters (bf16/fp16 with ZeRO) saves them in that dtype,
        # as DeepSpeed's module does; against an f32 run both are compared as f64 (never bitwise).
        floats = {"F64", "F32", "BF16", "F16"}
        if sa != sb or (da != db and not (da in floats and db in floats)):
            print(f"error: {name}: {da}{sa} vs {db}{sb}")
            return 2
        if da != db:
            bitwise = False
        bitwise = bitwise and ba == bb
        if not ba:
            continue
        d, ref = maxAbsDiff(values(da, ba), values(db, bb))
        if d > max_abs or d != d:
            max_abs, worst = d, name
        max_ref = max(max_ref, ref)
    rel = max_abs / max_ref if max_ref > 0 else max_abs
    print(f"max_abs={max_abs:.3e} max_ref={max_ref:.3e} rel={rel:.3e} bitwise={'yes' if bitwise else 'no'} "
          f"tensors={len(b)} worst={worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
