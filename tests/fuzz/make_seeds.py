#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/TARGET/) and the hand-made
regression inputs (tests/fuzz/regressions/TARGET/). Run from anywhere; idempotent. The files are
committed: this script documents how they were made."""
import gzip, json, os, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def put(kind, target, name, data):
    d = os.path.join(here, kind, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def gz(b):
    return gzip.compress(b, mtime=0)


# safetensors
def st(entries, data, meta=None):
    h = {}
    if meta:
        h["__metadata__"] = meta
    h.update(entries)
    hb = json.dumps(h).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + data

put("corpus", "safetensors", "two_tensors", st({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                                                "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}},
                                               struct.pack("<4f", 1, 2, 3, 4) + struct.pack("<q", 7), {"format": "pt"}))
put("corpus", "safetensors", "empty", st({}, b""))
put("corpus", "safetensors", "scalar_and_zero", st({"s": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]},
                                                    "z": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [8, 8]},
                                                    "u": {"dtype": "U8", "shape": [3], "data_offsets": [8, 11]},
                                                    "h": {"dtype": "F16", "shape": [1], "data_offsets": [11, 13]},
                                                    "i": {"dtype": "I32", "shape": [1], "data_offsets": [13, 17]}},
                                                   b"\0" * 17))
# Issue 21: 2^32 x 2^32 x 4 bytes overflows 64 bits to 0 and matched an empty data range.
put("regressions", "safetensors", "shape_product_overflow",
    st({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}, b""))
put("regressions", "safetensors", "huge_dims_with_zero",
    st({"w": {"dtype": "F32", "shape": [0, 4611686018427387904, 4611686018427387904], "data_offsets": [0, 0]}}, b""))

# IDX
def idx(dims, data, magic_type=0x08):
    return struct.pack(">I", (magic_type << 8) | len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + data

img = idx([2, 3, 4], bytes(range(24)))
lab = idx([5], bytes([1, 2, 3, 4, 5]))
put("corpus", "idx", "images_raw", img)
put("corpus", "idx", "labels_raw", lab)
put("corpus", "idx", "images_gz", gz(img))
put("corpus", "idx", "labels_gz", gz(lab))
put("corpus", "idx", "four_dims_gz", gz(idx([1, 2, 2, 2], b"\x09" * 8)))
# Issue 21: a small gzip file that inflates far beyond what its header says (a compressed bomb).
put("regressions", "idx", "gzip_bomb", gz(idx([10], b"\0" * 10 + b"\0" * (8 << 20))))
put("regressions", "idx", "header_promises_more_than_gzip_holds", gz(idx([1 << 31, 1 << 9], b"")))

# CIFAR-10
rec = lambda label, v: bytes([label]) + bytes([v]) * 3072
put("corpus", "cifar", "one_record", rec(3, 7))
put("corpus", "cifar", "two_records", rec(0, 1) + rec(9, 200))
put("corpus", "cifar", "bad_label", rec(10, 0))

# CIFAR-10's python version: a batch as Python 2's cPickle wrote the real files (SHORT_BINSTRING keys,
# numpy's _reconstruct, the pixels one BINSTRING, labels a list), and as Python 3 writes one at
# protocols 2 (bytes through _codecs.encode), 4 and 5 (numpy's _frombuffer), when numpy is here.
def python2_batch(n, labels):
    memo = [0]
    def put():
        memo[0] += 1
        return b"q" + bytes([memo[0]]) if memo[0] < 256 else b"r" + struct.pack("<I", memo[0])
    s = b"\x80\x02}" + put() + b"(U\x04data" + put() + b"cnumpy.core.multiarray\n_reconstruct\n" + put()
    s += b"cnumpy\nndarray\n" + put() + b"K\x00\x85U\x01b\x87R" + put()
    s += b"(K\x01K" + bytes([n]) + b"M\x00\x0c\x86cnumpy\ndtype\n" + put() + b"U\x02u1K\x00K\x01\x87R" + put()
    s += b"(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89T" + struct.pack("<i", n * 3072)
    s += bytes((i * 7) % 256 for i in range(n * 3072)) + b"tbU\x06labels" + put() + b"]" + put() + b"("
    s += b"".join(b"K" + bytes([v]) for v in labels) + b"eu."
    return s

put("corpus", "cifar_python", "python2_two", python2_batch(2, [3, 9]))
put("corpus", "cifar_python", "python2_label_12", python2_batch(1, [12]))
try:
    import pickle
    import numpy as np
    batch = {"data": np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072), "labels": [1, 2],
             "batch_label": "x", "filenames": ["a.png", "b.png"]}
    for protocol in (2, 4, 5):
        put("corpus", "cifar_python", "numpy_protocol_%d" % protocol, pickle.dumps(batch, protocol=protocol))
    batch["labels"] = np.array([4, 5], dtype=np.int64)
    put("corpus", "cifar_python", "numpy_labels", pickle.dumps(batch, protocol=4))
except ImportError:
    print("make_seeds.py: numpy not importable: the numpy seeds of cifar_python are left as they are")

# gzip: the first byte sets the read size (1 + b * 256)
put("corpus", "gzip", "small", b"\x00" + gz(b"hello lockstep\n" * 10))
put("corpus", "gzip", "zeros", b"\x10" + gz(b"\0" * 100000))
put("corpus", "gzip", "empty", b"\x01" + gz(b""))
put("corpus", "gzip", "two_members", b"\x02" + gz(b"a") + gz(b"b"))

# config: the first byte picks JSON (odd) or YAML (even)
cfgdir = os.path.join(root, "examples", "configs")
for name in sorted(os.listdir(cfgdir)):
    with open(os.path.join(cfgdir, name), "rb") as f:
        text = f.read()
    put("corpus", "config", name, (b"\x01" if name.endswith(".json") else b"\x00") + text)
put("corpus", "config", "inline.json", b"\x01" + json.dumps({
    "train_batch_size": 32, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.999], "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
    "model": {"name": "mlp", "hidden": [16, 8]},
    "data": {"dataset": "synthetic", "size": 64, "input_shape": [4, 4]},
    "checkpoint": {"every_steps": 5, "keep_last": 2}, "ddp": {"bucket_cap_mb": 1}}, indent=1).encode())
put("corpus", "config", "bad_syntax.json", b'\x01{\n "seed": 1\n "epochs": 2\n}\n')
put("corpus", "config", "dup.yaml", b"\x00seed: 1\nseed: 2\n")
put("corpus", "config", "anchors.yaml", b"\x00a: &x {lr: 1}\noptimizer: {type: SGD, params: *x}\n")

# images: JPEG and PNG files in the layouts the decoders convert (Pillow writes them; python3-pil)
def pil_seeds():
    try:
        from PIL import Image
    except ImportError:
        print("Pillow (python3-pil) missing: image seeds not written", file=sys.stderr)
        return
    import io

    def save(name, im, fmt, **kw):
        out = io.BytesIO()
        im.save(out, fmt, **kw)
        put("corpus", "image", name, out.getvalue())

    rgb = Image.frombytes("RGB", (12, 9), bytes((i * 7) % 256 for i in range(12 * 9 * 3)))
    save("rgb_420.jpg", rgb, "JPEG", quality=80)
    save("rgb_444_progressive.jpg", rgb, "JPEG", quality=90, subsampling=0, progressive=True)
    save("grey.jpg", rgb.convert("L"), "JPEG")
    save("cmyk.jpg", rgb.convert("CMYK"), "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    save("exif_orientation_6.jpg", rgb, "JPEG", exif=exif.tobytes())
    save("one_pixel.jpg", Image.new("RGB", (1, 1), (200, 30, 90)), "JPEG")
    save("rgba.png", rgb.convert("RGBA"), "PNG")
    pal = rgb.convert("P", palette=Image.ADAPTIVE, colors=8)
    save("palette_trns.png", pal, "PNG", transparency=0)
    save("grey_1bit.png", rgb.convert("1"), "PNG")
    save("grey16.png", rgb.convert("L").convert("I"), "PNG")  # written as 16-bit grey
    save("interlaced.png", rgb, "PNG", interlace=1)
    save("exif_orientation_8.png", rgb, "PNG", exif=(lambda e: (e.__setitem__(0x0112, 8), e)[1])(Image.Exif()).tobytes())

    # A small JPEG whose frame header announces 65500 x 65500 pixels: refused from the header,
    # before anything is allocated.
    out = io.BytesIO()
    rgb.save(out, "JPEG")
    b = bytearray(out.getvalue())
    sof = b.index(b"\xff\xc0")
    b[sof + 5:sof + 9] = struct.pack(">HH", 65500, 65500)
    put("regressions", "image", "huge_dimensions_small_file", bytes(b))


pil_seeds()
# A file starting like a JPEG whose next marker is garbage: once left the thread's TurboJPEG
# handle broken for every later image (the target decodes a good JPEG after each input).
put("regressions", "image", "bad_marker_after_soi", b"\xff\xd8\xff not a JPEG")

# hostfiles
put("corpus", "hostfile", "slots", "# cluster\nnode1 slots=4\nnode2 slots=4 max_slots=8\n")
put("corpus", "hostfile", "colon", "10.0.0.1:2\n10.0.0.2\n")
put("corpus", "hostfile", "bad", "node1 slots=x\n")

# store frames: u32 length, u8 command, fields (bytes = u32 length + data, i64)
def b(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<I", len(s)) + s

def frame(cmd, body=b""):
    body = bytes([cmd]) + body
    return struct.pack("<I", len(body)) + body

q = struct.pack("<q", 100)
put("corpus", "store", "set_get", frame(1, b("k") + b("v")) + frame(2, b("k") + q))
put("corpus", "store", "add", frame(3, b("c") + struct.pack("<q", 5)) + frame(3, b("c") + struct.pack("<q", -2)))
put("corpus", "store", "compare_set", frame(4, b("k") + b("") + b("x")) + frame(4, b("k") + b("x") + b("y")))
put("corpus", "store", "wait_check", frame(5, struct.pack("<I", 2) + b("a") + b("b") + q) +
    frame(6, struct.pack("<I", 1) + b("a")))
put("corpus", "store", "delete_num", frame(7, b("k")) + frame(8))
# Found while writing the target: a timeout of 2^63-1 ms overflowed the deadline (nanoseconds).
put("regressions", "store", "huge_timeout", frame(2, b("k") + struct.pack("<q", 2**63 - 1)))
# An add that overflows the counter (was signed overflow in the server).
put("regressions", "store", "counter_overflow",
    frame(1, b("c") + b("9223372036854775807")) + frame(3, b("c") + struct.pack("<q", 1)))
print("seeds written under", here)
