#!/usr/bin/env bash
# lockstep's allreduce (shm and gloo backends) next to torch.distributed's gloo, same machine,
# same run, same sizes; prints each backend's lines and the busbw ratio shm / torch-gloo.
# The peer: current PyTorch from PyPI in the build's bench-venv (bench/scripts/peer.sh; PYTHON=/usr/bin/python3
# runs Debian's 1.13 instead), run without and with the glibc malloc tunables; per size the faster counts.
#
#   bench/scripts/bench_allreduce.sh [LOCKSTEP_BINARY] [NPROC] [SIZES]
#   e.g. bench/scripts/bench_allreduce.sh build/lockstep 2 4096,67108864
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-$here/../../build/lockstep}"
nproc="${2:-2}"
sizes="${3:-4096,67108864}"
source "$here/peer.sh"
peer_python "$(dirname "$bin")" bench_allreduce

run() { echo "== $1"; shift; "$@" | tee "$tmp/$name"; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
name=shm run "lockstep shm" "$bin" bench allreduce --backend shm --nproc "$nproc" --sizes "$sizes"
name=gloo run "lockstep gloo" "$bin" bench allreduce --backend gloo --nproc "$nproc" --sizes "$sizes"
echo "== torch $("$python" -c 'import torch; print(torch.__version__)')"
name=torch run "torch.distributed gloo" "$python" "$here/torch_allreduce.py" --backend gloo --nproc "$nproc" --sizes "$sizes"
name=torch_tuned GLIBC_TUNABLES=$tunables run "torch.distributed gloo, malloc tunables on" "$python" \
  "$here/torch_allreduce.py" --backend gloo --nproc "$nproc" --sizes "$sizes"

echo "== ratios (lockstep shm vs torch gloo)"
python3 - "$tmp" <<'PY'
import re, sys
def load(path):
    out = {}
    for line in open(path):
        m = re.search(r"bytes=(\d+) time_us=([\d.]+) algbw_GBps=([\d.]+) busbw_GBps=([\d.]+)", line)
        if m:
            out[int(m[1])] = (float(m[2]), float(m[4]))
    return out
d = sys.argv[1]
shm, plain, tuned = load(f"{d}/shm"), load(f"{d}/torch"), load(f"{d}/torch_tuned")
torch = {b: min(plain[b], tuned.get(b, plain[b])) for b in plain}  # the faster run (smaller time)
for b in sorted(shm):
    if b in torch:
        print(f"bytes={b} shm_time_us={shm[b][0]:.2f} torch_time_us={torch[b][0]:.2f} "
              f"speedup={torch[b][0] / shm[b][0]:.1f}x busbw_ratio={shm[b][1] / max(torch[b][1], 1e-12):.1f}x")
PY
