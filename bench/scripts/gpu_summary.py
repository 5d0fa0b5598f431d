"""Reading what bench/gpu.bench.sh and bench/gpu_lm.bench.sh keep of each side's run (NAME.txt in
their output directory) for their summaries: the versions line and one line per case. No PyTorch
needed."""
import os
import re

KV = re.compile(r'(\w+)=("[^"]*"|\S+)')
TORCH = ["torch-eager", "torch-compile", "torch-reduce-overhead"]


def read_lines(out, name):
    """The versions line's keys, and per case line its keys with why it has no figures where it
    has none ("failed" or "skipped"); a missing file reads as no lines."""
    versions, cases = {}, []
    path = os.path.join(out, name)
    for line in open(path) if os.path.exists(path) else []:
        kv = {k: v.strip('"') for k, v in KV.findall(line.split(" failed:")[0].split(" skipped:")[0])}
        if "impl" not in kv:
            versions = versions or kv
            continue
        cases.append((kv, "failed" if " failed:" in line else "skipped"))
    return versions, cases
