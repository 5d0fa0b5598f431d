"""Reads a model that `lockstep train` wrote with real clients and checks it against lockstep's own numbers.

  torch_reads_model.py RUN_DIR --data-dir DIR --mean M --std S

RUN_DIR holds model.safetensors and summary.json of a mnist_cnn run on Fashion-MNIST. The file is
opened with the `safetensors` package from PyPI, loaded (strict: every name and shape) into seed
001's `Net` (the PyTorch DDP MNIST tutorial's model, as written there: dense1, dense2, a softmax
output), and Net evaluates the same test set the way train::evaluate does: inputs
(v / 255 - mean) / std computed in float64 then stored as float32, cross-entropy of the logits
(the layers before the seed's softmax) summed per batch of 500 and divided by the sample count,
accuracy by the argmax of Net's output. The loss
must match summary.json's test_loss to 1e-5 relative and the accuracy to one sample. As a control,
the same comparison must fail once one weight is nudged: a tolerance that lets that through would
prove nothing. Exit 0 and a last line "torch_reads_model: OK ..." when all holds.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

# Measured here: 1e-8 apart (oneDNN vs PyTorch's kernels, float32). 1e-5 leaves three orders of
# magnitude for other CPUs and still catches one dense2 bias off by 0.01 (4e-5).
LOSS_RTOL = 1e-5
ACCURACY_SAMPLES = 1


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "scripts"))
from seed_cnn import Net as SeedLogits  # noqa: E402  seed 001's Net up to its last softmax


class Net(SeedLogits):
    """Seed 001's model as the tutorial writes it: the logits, then a softmax."""

    def logits(self, x):
        return super().forward(x)

    def forward(self, x):
        output = F.softmax(self.logits(x), dim=1)
        return output


def fail(msg):
    print(f"torch_reads_model: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def load_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, n = struct.unpack(">II", data[:8])
    if got != magic:
        fail(f"{path}: IDX magic {got:#x}, expected {magic:#x}")
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)


def test_set(data_dir, mean, std):
    images = load_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), 0x803)
    labels = load_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), 0x801)
    # lockstep's loadMnist: a float32 table of (v / 255.0 - mean) / std computed in double.
    lut = ((np.arange(256, dtype=np.float64) / 255.0 - mean) / std).astype(np.float32)
    return torch.from_numpy(lut[images]), torch.from_numpy(labels.astype(np.int64))


@torch.no_grad()
def evaluate(model, x, y, batch=500):
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(x), batch):
        loss_sum += float(F.cross_entropy(model.logits(x[i:i + batch]), y[i:i + batch], reduction="sum"))
        correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    return loss_sum / len(x), correct


def compare(loss, correct, n, summary):
    """The ways (loss, correct) disagrees with summary.json; empty when they agree."""
    problems = []
    rel = abs(loss - summary["test_loss"]) / abs(summary["test_loss"])
    if rel > LOSS_RTOL:
        problems.append(f"test loss {loss:.8f} vs summary.json {summary['test_loss']:.8f} "
                        f"(relative difference {rel:.2e} > {LOSS_RTOL:.0e})")
    off = abs(correct - summary["test_accuracy"] * n)
    if off > ACCURACY_SAMPLES + 1e-6:
        problems.append(f"test accuracy {correct}/{n} = {correct / n:.6f} vs summary.json "
                        f"{summary['test_accuracy']:.6f} ({off:.1f} samples apart > {ACCURACY_SAMPLES})")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--mean", type=float, required=True)
    ap.add_argument("--std", type=float, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model_path = os.path.join(args.run_dir, "model.safetensors")
    with open(os.path.join(args.run_dir, "summary.json")) as f:
        summary = json.load(f)

    with safe_open(model_path, framework="pt") as f:
        metadata = f.metadata() or {}
        names = sorted(f.keys())
    if metadata.get("format") != "pt":
        fail(f"{model_path}: metadata {metadata}, expected format=pt (what transformers' loaders require)")
    state = load_file(model_path)
    for name, t in state.items():
        if t.dtype != torch.float32:
            fail(f"{model_path}: {name} is {t.dtype}, expected float32")
    model = Net()
    expected = sorted(model.state_dict().keys())
    if names != expected:
        fail(f"{model_path}: tensors {names}, the seed's Net has {expected}")
    model.load_state_dict(state, strict=True)  # shapes are checked here

    x, y = test_set(args.data_dir, args.mean, args.std)
    n = len(y)
    loss, correct = evaluate(model, x, y)
    problems = compare(loss, correct, n, summary)
    if problems:
        fail("PyTorch disagrees with lockstep's summary.json: " + "; ".join(problems))
    rel = abs(loss - summary["test_loss"]) / abs(summary["test_loss"])
    print(f"torch_reads_model: PyTorch: test_loss={loss:.8f} accuracy={correct}/{n}; lockstep summary.json: "
          f"test_loss={summary['test_loss']:.8f} test_accuracy={summary['test_accuracy']:.6f} "
          f"(loss {rel:.1e} apart, tolerance {LOSS_RTOL:.0e})")

    # Control: one weight of the last layer nudged must be caught.
    with torch.no_grad():
        model.dense2.bias[0] += 0.05
    nudged_loss, nudged_correct = evaluate(model, x, y)
    if not compare(nudged_loss, nudged_correct, n, summary):
        fail(f"control: with dense2.bias[0] nudged by 0.05 the comparison still passes (loss {nudged_loss:.8f}); "
             "the tolerance is too loose to tell models apart")
    print(f"torch_reads_model: OK ({len(names)} tensors; control with one weight nudged: loss {nudged_loss:.8f}, "
          f"caught)")


if __name__ == "__main__":
    main()
