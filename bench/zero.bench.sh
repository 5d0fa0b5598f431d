#!/usr/bin/env bash
# ZeRO stages 0 (DDP), 1, 2 and 3 side by side through `lockstep train`: samples/s, each rank's
# model-state bytes from the memory report, and each rank's peak RSS (VmRSS polled every 50 ms).
#   bench/zero.bench.sh [BUILD_DIR] [STEPS]     (STAGES="0 3" to run some stages only)
# The model is an MLP of 10 hidden layers of 1536 (23.6M f32 parameters, Adam), 2 ranks, buckets
# of 5e6 elements. Rank 0 also writes the checkpoints (the whole optimizer state, gathered), so
# rank 1's peak is the one that shows what the stages keep while training. DeepSpeed itself is not
# run here (no DeepSpeed install on this machine).
set -euo pipefail
build=${1:-build}
steps=${2:-12}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/deep.yaml" <<YAML
model: {name: mlp, hidden: [1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536]}
data: {dataset: synthetic, size: 4096, test_size: 64, input_shape: [1536], num_classes: 10}
train_micro_batch_size_per_gpu: 32
optimizer: {type: Adam, params: {lr: 0.0001}}
max_steps: $steps
steps_per_print: 4
zero_optimization: {reduce_bucket_size: 5e6, allgather_bucket_size: 5e6}
YAML
for stage in ${STAGES:-0 1 2 3}; do
  python3 - "$build/lockstep" train "$dir/deep.yaml" --nproc-per-node 2 --output-dir "$dir/s$stage" \
    --set zero_optimization.stage=$stage <<'PY'
import os, subprocess, sys, time
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak = {}
def kids(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out
while p.poll() is None:
    stack = kids(p.pid)
    while stack:
        c = stack.pop()
        stack += kids(c)
        try:
            with open(f"/proc/{c}/status") as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
            peak[c] = max(peak.get(c, 0), rss)
        except (OSError, StopIteration):
            pass
    time.sleep(0.05)
if p.returncode:
    sys.exit(f"lockstep train exited {p.returncode}")
print("peak RSS per rank process (MiB):", " ".join(str(v // 1024) for _, v in sorted(peak.items())))
PY
  python3 -c "
import json, sys
s = json.load(open('$dir/s$stage/summary.json'))
m = s['memory']
print('stage $stage: samples/s %.1f' % s['samples_per_second'])
for r in m:
    print('  rank %d: parameters %d, gradients %d, optimizer_states %d bytes' % (r['rank'], r['parameters'], r['gradients'], r['optimizer_states']))
"
done
