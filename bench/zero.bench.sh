#!/usr/bin/env bash
# ZeRO stages 0 (DDP), 1, 2 and 3 side by side: `lockstep train` against DeepSpeed itself (PyPI, its
# CPU accelerator over gloo) on the same model, data, micro-batch, Adam, steps and bucket sizes.
#   bench/zero.bench.sh [BUILD_DIR] [STEPS]
#   STAGES="0 3"      some stages only
#   PEER=0            lockstep alone (no DeepSpeed)
#   WORLD             ranks (default 2; more ranks than cores share them)
#   HIDDEN, LAYERS    the MLP's width and depth (default 2304 x 10: 51.4M f32 parameters)
#   BUCKET            reduce_bucket_size and allgather_bucket_size, both sides (default 5e6 elements)
#   WARMUP            DeepSpeed steps left out of its samples/s (default 2)
#   BUCKET_VIEW=1     lockstep's DDP (stages 0 and 1) with ddp.gradient_as_bucket_view: no second copy of
#                     the gradients, as the formula counts them (torch's DDP option of that name)
#   S3_PREFETCH, S3_LIVE, S3_REUSE, S3_PERSIST  stage 3's gathering keys on both sides (default: one
#                     layer prefetched, 1.2e7 live elements, no reuse, DeepSpeed's 1e5 persistence)
#   PRECISION=bf16    both sides in bf16 (lockstep: bf16.enabled, which with ZeRO keeps bf16 parameters and
#                     gradients and f32 master weights; DeepSpeed: its bf16 section); the formula is then
#                     DeepSpeed's bf16 one: stage 1 4 Psi + 12 Psi/N, stage 2 2 Psi + 14 Psi/N, stage 3
#                     16 Psi/N + the live gathered bf16 parameters (DDP: lockstep's f32 16 Psi)
#   PRECISION=bf16master  bf16 with bf16_master_weights_and_grads and bf16_optimizer_states on both sides
#                     (no f32 master weights, bf16 Adam states; stages 1-3 only, the default STAGES then):
#                     stage 1 4 Psi + 4 Psi/N, stage 2 2 Psi + 6 Psi/N, stage 3 8 Psi/N + the live gathered
#                     bf16 parameters
#   DS_OPTIMIZER      config (default): the JSON's "optimizer" section, DeepSpeed's own Adam (on the CPU
#                     accelerator its fused C++ Adam, JIT-compiled on first use: minutes); torch:
#                     torch.optim.Adam handed to deepspeed.initialize
# The model: an MLP on 1536 synthetic features, LAYERS hidden layers of HIDDEN (ReLU), 10 classes; 2
# ranks, micro-batch 32 per rank, Adam (lr 1e-4), buckets of 5e6 elements, one thread and one core per
# rank (taskset, bench/scripts/peer.sh). Per stage it prints lockstep's samples/s, each rank's peak RSS
# and memory report, the issue's formula for the model states per rank (Adam, f32, N ranks: DDP 16 Psi,
# stage 1 8 Psi + 8 Psi/N, stage 2 4 Psi + 12 Psi/N, stage 3 16 Psi/N + the live gathered parameters),
# its peak RSS above a process baseline as a multiple of that formula, then DeepSpeed's samples/s, peak RSS per rank and the tensors it holds after backward (bench/scripts/deepspeed_zero.py), and at the
# end one table with the ratios. Peak RSS is each rank process's kernel high-water mark (getrusage,
# bench/scripts/peak_rss.py). lockstep's samples/s is summary.json's (the whole run, first step
# included); DeepSpeed's leaves out its first WARMUP steps: the peer gets the better deal. DeepSpeed runs
# without and with the glibc malloc tunables; the faster counts. lockstep's rank 0 also writes the
# checkpoint (the whole optimizer state, gathered), so its rank 1 is the one that shows what the stages
# keep while training. The peer: PyPI's torch and deepspeed in BUILD_DIR/bench-venv ($VENV), installed on
# first use; PYTHON=... names another interpreter that has both.
set -euo pipefail
build=${1:-build}
steps=${2:-12}
here=$(cd "$(dirname "$0")" && pwd)
hidden=${HIDDEN:-2304}
layers=${LAYERS:-10}
warmup=${WARMUP:-2}
features=1536 classes=10 micro=32 bucket=${BUCKET:-5e6} world=${WORLD:-2}
precision=${PRECISION:-fp32}
case $precision in fp32 | bf16 | bf16master) ;; *) echo "PRECISION=$precision: fp32, bf16 or bf16master" >&2; exit 2 ;; esac
default_stages="0 1 2 3"
[ "$precision" = bf16master ] && default_stages="1 2 3"  # DeepSpeed's rule: master weights live in ZeRO
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1 DS_ACCELERATOR=cpu
port=$((29600 + RANDOM % 90))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$here/scripts/peer.sh"

s3_prefetch=${S3_PREFETCH:-6e6} s3_live=${S3_LIVE:-1.2e7} s3_reuse=${S3_REUSE:-0} s3_persist=${S3_PERSIST:-1e5}
s3_yaml="stage3_prefetch_bucket_size: $s3_prefetch, stage3_max_live_parameters: $s3_live, stage3_max_reuse_distance: $s3_reuse, stage3_param_persistence_threshold: $s3_persist"
s3_json="{\"stage3_prefetch_bucket_size\": $s3_prefetch, \"stage3_max_live_parameters\": $s3_live, \"stage3_max_reuse_distance\": $s3_reuse, \"stage3_param_persistence_threshold\": $s3_persist}"
psi=$((features * hidden + hidden + (layers - 1) * (hidden * hidden + hidden) + hidden * classes + classes))
hidden_list=$(printf "%s, " $(for ((i = 0; i < layers; i++)); do echo "$hidden"; done))
cat > "$dir/deep.yaml" <<YAML
model: {name: mlp, hidden: [${hidden_list%, }]}
data: {dataset: synthetic, size: 4096, test_size: 64, input_shape: [$features], num_classes: $classes}
train_micro_batch_size_per_gpu: $micro
optimizer: {type: Adam, params: {lr: 0.0001}}
max_steps: $steps
steps_per_print: 4
zero_optimization: {reduce_bucket_size: $bucket, allgather_bucket_size: $bucket, $s3_yaml}
YAML
[ "$precision" = bf16 ] && echo "bf16: {enabled: true}" >>"$dir/deep.yaml"
[ "$precision" = bf16master ] &&
  echo "bf16: {enabled: true, bf16_master_weights_and_grads: true, bf16_optimizer_states: true}" >>"$dir/deep.yaml"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc --all) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: MLP $features -> ${layers} x $hidden -> $classes, Psi = $psi parameters ($precision, Adam), $world ranks, micro-batch $micro, $steps steps"

peer_error=
if [ "${PEER:-1}" != 0 ]; then
  peer_python "$build" zero.bench deepspeed
  if ! versions=$("$python" -c "import torch, deepspeed; print(f'torch {torch.__version__}, deepspeed {deepspeed.__version__}')" 2>"$dir/import.err"); then
    peer_error="deepspeed does not import in $python: $(tail -n 1 "$dir/import.err")"
  else
    echo "peer: $versions (DS_ACCELERATOR=cpu, gloo, DS_OPTIMIZER=${DS_OPTIMIZER:-config})"
  fi
fi

# Stage 3's "+ the live gathered modules": the whole parameters resident at once, as the coordinator
# gathers them (parallel/zero/parameter_coordinator.h): the persistent ones (at most
# stage3_param_persistence_threshold elements: the biases and the classifier, whole on every rank)
# and, at the worst layer, that layer's weight plus those prefetched within
# stage3_prefetch_bucket_size and stage3_max_live_parameters.
live_gathered=$(python3 -c "
f, h, l, c = $features, $hidden, $layers, $classes
pref, live_max, thr = float('$s3_prefetch'), float('$s3_live'), float('$s3_persist')
params = [f * h, h] + [h * h, h] * (l - 1) + [h * c, c]
persistent = sum(x for x in params if x <= thr)
units = [x for x in params if x > thr]
peak = 0
for order in (units, units[::-1]):  # forward prefetches the next layers, backward the ones before
    for i, u in enumerate(order):
        live, budget = u, pref
        for v in order[i + 1:]:
            if budget <= 0 or live + v > live_max: break
            live += v
            budget -= v
        peak = max(peak, live)
print(int(peak + persistent))")
echo "stage 3's formula adds the live gathered parameters: $live_gathered elements ($((live_gathered * 4 / 1048576)) MiB; persistent ones, a layer and its prefetch)"
formula() {  # formula STAGE: the issue's model-state bytes per rank (stage 3: + the live gathered parameters)
  python3 -c "
s, p, n, g = $1, $psi, $world, $live_gathered
if '$precision' == 'bf16':
    print(int({0: 16 * p, 1: 4 * p + 12 * p / n, 2: 2 * p + 14 * p / n, 3: 16 * p / n + 2 * g}[s]))
elif '$precision' == 'bf16master':
    print(int({1: 4 * p + 4 * p / n, 2: 2 * p + 6 * p / n, 3: 8 * p / n + 2 * g}[s]))
else:
    print(int({0: 16 * p, 1: 8 * p + 8 * p / n, 2: 4 * p + 12 * p / n, 3: 16 * p / n + 4 * g}[s]))"
}
peak_mib() {  # peak_mib PREFIX: each rank's peak RSS in MiB, space-separated
  local r out=()
  for ((r = 0; r < world; r++)); do out+=($(($(cat "$1.$r" 2>/dev/null || echo 0) / 1024))); done
  echo "${out[*]}"
}
peer_run() {  # peer_run STAGE TAG TUNABLES: one DeepSpeed run; its rank-0 lines in $dir/TAG.out
  GLIBC_TUNABLES=$3 run_ranks "$world" python3 "$here/scripts/peak_rss.py" "$dir/$2.rss" timeout 1200 "$python" \
    "$here/scripts/deepspeed_zero.py" --stage "$1" --hidden "$hidden" --layers "$layers" --in-features "$features" \
    --classes "$classes" --micro-batch "$micro" --bucket "$bucket" --steps "$steps" --warmup-steps "$warmup" \
    --optimizer "${DS_OPTIMIZER:-config}" --stage3-json "$s3_json" --precision "$precision" >"$dir/$2.out" || true
}

# The process baseline: the same job with a 16-wide one-layer MLP (libraries, data, process group,
# allocator), so that peak RSS minus it is what the model and its training add.
sed "s/^model: .*/model: {name: mlp, hidden: [16]}/" "$dir/deep.yaml" >"$dir/base.yaml"
run_ranks "$world" python3 "$here/scripts/peak_rss.py" "$dir/base.rss" "$build/lockstep" train "$dir/base.yaml" \
  --output-dir "$dir/base" >/dev/null || true
base_rss=$(peak_mib "$dir/base.rss")
echo "process baseline (16-wide MLP, same data and ranks): peak RSS per rank (MiB): $base_rss"
above() {  # above "RSS..." : each rank's RSS minus the baseline, and the ratio to formula MiB $2
  python3 -c "
import sys
rss, base, want = [int(v) for v in sys.argv[1].split()], [int(v) for v in sys.argv[2].split()], float(sys.argv[3])
print(' '.join('%d' % (r - b) for r, b in zip(rss, base)), '(%.2fx the formula)' % (max(r - b for r, b in zip(rss, base)) / want))" \
    "$1" "$base_rss" "$2"
}

declare -A row
for stage in ${STAGES:-$default_stages}; do
  view_arg=
  [ "${BUCKET_VIEW:-0}" = 1 ] && [ "$stage" -lt 2 ] && view_arg="--set ddp.gradient_as_bucket_view=true"
  run_ranks "$world" python3 "$here/scripts/peak_rss.py" "$dir/ls$stage.rss" "$build/lockstep" train "$dir/deep.yaml" \
    --output-dir "$dir/s$stage" --set zero_optimization.stage="$stage" $view_arg >/dev/null || true
  if [ ! -f "$dir/s$stage/summary.json" ]; then
    echo "stage $stage: lockstep train failed:" >&2
    tail -n 5 "$dir/ls$stage.rss.err.0" "$dir/ls$stage.rss.err.1" >&2
    exit 1
  fi
  ls_rss=$(peak_mib "$dir/ls$stage.rss")
  want=$(formula "$stage")
  echo "peak RSS per rank process (MiB): $ls_rss; above the baseline: $(above "$ls_rss" $((want / 1048576)))"
  python3 - "$dir/s$stage/summary.json" "$stage" "$want" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
stage, want = sys.argv[2], int(sys.argv[3])
print('stage %s: samples/s %.1f' % (stage, s['samples_per_second']))
for r in s['memory']:
    have = r['parameters'] + r['gradients'] + r['optimizer_states']
    print('  rank %d: parameters %d, gradients %d, optimizer_states %d bytes; sum %.1f MiB, formula %.1f MiB (%.3fx)'
          % (r['rank'], r['parameters'], r['gradients'], r['optimizer_states'], have / 2**20, want / 2**20, have / want))
PY
  ls_sps=$(python3 -c "import json,sys; print('%.1f' % json.load(open(sys.argv[1]))['samples_per_second'])" "$dir/s$stage/summary.json")
  ls_report=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['memory']; print(' '.join('%.0f' % ((r['parameters']+r['gradients']+r['optimizer_states'])/2**20) for r in m))" "$dir/s$stage/summary.json")
  ds_sps=- ds_all=- ds_rss=- ds_states=-
  if [ "${PEER:-1}" != 0 ] && [ -z "$peer_error" ]; then
    peer_run "$stage" ds$stage ""
    peer_run "$stage" ds${stage}t "$tunables"
    pick=$(python3 - "$dir/ds$stage.out" "$dir/ds${stage}t.out" <<'PY'
import re, sys
best, tag = -1.0, ""
for path, name in zip(sys.argv[1:], ("plain", "tuned")):
    m = re.search(r"samples_per_second=([0-9.]+)", open(path).read())
    if m and float(m.group(1)) > best:
        best, tag = float(m.group(1)), name
print(tag)
PY
    )
    if [ -z "$pick" ]; then
      echo "  deepspeed stage $stage did not run; rank 0's last error lines:"
      tail -n 8 "$dir/ds$stage.rss.err.0" | sed 's/^/    /'
      ds_sps=failed
    else
      field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
      for t in ds$stage ds${stage}t; do  # both runs, so that the tunables' cost in memory shows too
        line=$(grep '^impl=deepspeed' "$dir/$t.out" || true)
        if [ -z "$line" ]; then
          echo "  deepspeed stage $stage, malloc tunables $([ "$t" = "ds$stage" ] && echo off || echo on): did not run"
          continue
        fi
        echo "  deepspeed stage $stage, malloc tunables $([ "$t" = "ds$stage" ] && echo off || echo on):" \
          "samples/s $(field samples_per_second "$line") (after $warmup warm-up steps; $(field samples_per_second_all "$line")" \
          "over all steps); peak RSS per rank (MiB): $(peak_mib "$dir/$t.rss") (before the model:" \
          "$(field start_rss_mib "$line" | tr , ' '))"
      done
      tag=ds$stage
      [ "$pick" = tuned ] && tag=ds${stage}t
      line=$(grep '^impl=deepspeed' "$dir/$tag.out")
      ds_sps=$(field samples_per_second "$line") ds_all=$(field samples_per_second_all "$line")
      ds_rss=$(peak_mib "$dir/$tag.rss")
      echo "  deepspeed stage $stage counts the run with the tunables $([ "$pick" = tuned ] && echo on || echo off) (the faster);" \
        "the tensors it holds after backward:"
      grep '^memory ' "$dir/$tag.out" | python3 -c "
import sys
out = []
for line in sys.stdin:
    f = dict(kv.split('=') for kv in line.split()[1:])
    states = sum(int(f[k]) for k in ('parameters', 'master', 'gradients', 'optimizer_states'))
    print('  deepspeed rank %s: parameters %s, master copies %s, gradients %s, optimizer_states %s, other %s bytes; model states %.1f MiB'
          % (f['rank'], f['parameters'], f['master'], f['gradients'], f['optimizer_states'], f['other'], states / 2**20))
    out.append('%.0f' % (states / 2**20))
open(sys.argv[1], 'w').write(' '.join(out))" "$dir/$tag.states"
      ds_states=$(cat "$dir/$tag.states")
    fi
  fi
  row[$stage]="$ls_sps|$ds_sps|$ds_all|$ls_rss|$ds_rss|$((want / 1048576))|$ls_report|$ds_states"
done

[ -n "$peer_error" ] && echo "DeepSpeed did not run: $peer_error"
echo
echo "side by side ($world ranks, Psi = $psi; MiB per rank, rank 0 first; ratio = lockstep / deepspeed, of rank 1's RSS;"
echo "deepspeed's samples/s and RSS from its faster run; formula = the issue's model states per rank; ls report ="
echo "lockstep's memory report; ds states = DeepSpeed's parameters + master copies + gradients + optimizer states):"
printf "%-6s %10s %10s %7s  %-11s %-11s %6s  %8s %-11s %-11s\n" stage "ls samp/s" "ds samp/s" ratio \
  "ls RSS" "ds RSS" ratio formula "ls report" "ds states"
for stage in ${STAGES:-$default_stages}; do
  IFS='|' read -r ls_sps ds_sps ds_all ls_rss ds_rss want ls_report ds_states <<<"${row[$stage]}"
  ratios=$(python3 -c "
import sys
def r(a, b):
    try: return '%.2fx' % (float(a) / float(b))
    except (ValueError, ZeroDivisionError): return '-'
print(r(sys.argv[1], sys.argv[2]), r(sys.argv[3].split()[-1], sys.argv[4].split()[-1]))" "$ls_sps" "$ds_sps" "$ls_rss" "$ds_rss")
  printf "%-6s %10s %10s %7s  %-11s %-11s %6s  %8s %-11s %-11s\n" "$stage" "$ls_sps" "$ds_sps" "${ratios% *}" \
    "${ls_rss// /,}" "${ds_rss// /,}" "${ratios#* }" "$want" "${ls_report// /,}" "${ds_states// /,}"
done
