#!/usr/bin/env bash
# lockstep's reduce_scatter next to its allreduce of the same input, shm and gloo backends,
# ROUNDS rounds that alternate the two (so that a noisy neighbour hits both alike); prints the
# median of each line's figures and, per size, reduce_scatter's time and bytes as a share of the
# allreduce's (about 0.5 each at large sizes: a reduce-scatter is half of an allreduce).
#
#   bench/scripts/bench_reduce_scatter.sh [LOCKSTEP_BINARY] [NPROC] [SIZES] [ROUNDS]
#   e.g. bench/scripts/bench_reduce_scatter.sh build/lockstep 2 4096,65536,1048576,16777216,67108864 5
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-$here/../../build/lockstep}"
nproc="${2:-2}"
sizes="${3:-4096,65536,1048576,16777216,67108864}"
rounds="${4:-5}"
python="${PYTHON:-python3}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for backend in shm gloo; do
    for what in allreduce reduce_scatter; do
      "$bin" bench "$what" --backend "$backend" --nproc "$nproc" --sizes "$sizes" >> "$tmp/$backend.$what"
    done
  done
done

"$python" - "$tmp" "$rounds" <<'PY'
import re, statistics, sys
d, rounds = sys.argv[1], sys.argv[2]
keys = ["time_us", "algbw_GBps", "busbw_GBps", "sent_bytes", "wchar_bytes"]
def load(path):
    out = {}
    for line in open(path):
        f = dict(re.findall(r"(\w+)=([\d.]+)", line))
        if "bytes" in f:
            out.setdefault(int(f["bytes"]), []).append({k: float(f[k]) for k in keys})
    return {b: {k: statistics.median(x[k] for x in runs) for k in keys} for b, runs in out.items()}
for backend in ["shm", "gloo"]:
    ar, rs = load(f"{d}/{backend}.allreduce"), load(f"{d}/{backend}.reduce_scatter")
    for what, t in [("allreduce", ar), ("reduce_scatter", rs)]:
        print(f"== {backend} {what} (median of {rounds} rounds)")
        for b in sorted(t):
            print(f"bytes={b} " + " ".join(f"{k}={t[b][k]:.{0 if k.endswith('bytes') else 3}f}" for k in keys))
    print(f"== {backend} reduce_scatter / allreduce")
    for b in sorted(rs):
        a = ar.get(b) or ar.get(min(ar, key=lambda x: abs(x - b)))  # rs rounds its input to n blocks
        wchar = f"{rs[b]['wchar_bytes'] / a['wchar_bytes']:.2f}" if a["wchar_bytes"] > 0 else "-"
        print(f"bytes={b} time_ratio={rs[b]['time_us'] / a['time_us']:.2f} "
              f"sent_ratio={rs[b]['sent_bytes'] / a['sent_bytes']:.2f} wchar_ratio={wchar}")
PY
