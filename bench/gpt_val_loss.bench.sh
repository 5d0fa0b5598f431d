#!/usr/bin/env bash
# Same loss curve as PyTorch? `lockstep train examples/configs/gpt_fortunes.yaml` (gpt-mini, block 256,
# micro-batch 8, AdamW 5e-4, clipping 1.0, dropout 0.1, fortunes bytes) and its PyTorch twin
# (bench/scripts/torch_gpt.py, minGPT attention) train on exactly the same batches for STEPS steps, one
# rank each. The batches are lockstep's: bench_train_order prints the order its trainer draws (its
# sampler and seed), and the peer reads it. Both validate on all validation windows at each epoch's end
# and at the last step. Initial weights (unless INIT=same) and dropout masks come from each framework's
# own generator (same distributions), so the curves agree statistically, not bitwise.
#   bench/gpt_val_loss.bench.sh [BUILD_DIR] [STEPS] [LOG_EVERY]
# BUILD_DIR is a build tree (default build: BUILD_DIR/lockstep, BUILD_DIR/bench/bench_train_order, the
# PyTorch peer from peer.sh: PYTHON, else PyPI's torch in BUILD_DIR/bench-venv) or the GPU bundle of
# scripts/gpu-check.sh (.gpu, or only .gpu.tar.xz carried: BUILD_DIR/bin/lockstep and bench_train_order,
# their libraries through scripts/gpu-env.sh; the peer is the machine's own python3 (PYTHON to change it),
# never a venv; the corpus defaults to the bundle's copy, BUILD_DIR/data/fortunes).
# Environment:
#   DEVICE     cpu (default): both sides side by side, each pinned to its own core (taskset);
#              cuda: lockstep with device=cuda, then torch_gpt.py --device cuda (one GPU: one after the
#              other, not pinned); TF32 off on both sides (lockstep's and PyTorch's default for matmuls)
#   PRECISION  f32 (default; fp32 is the same) or bf16: lockstep bf16.enabled=true (bf16 autocast, f32
#              master weights), torch_gpt.py --precision bf16 (torch.autocast bf16)
#   CORPUS     the text directory both sides read (default /usr/share/games/fortunes, Debian's fortunes;
#              with the bundle its copy BUILD_DIR/data/fortunes); lockstep gets it as data.root
#   OUT_DIR    keep the order, both logs and lockstep's run there (default: a temporary directory, removed)
#   INIT       own (default): each side draws its own initial weights (the same distributions); same:
#              PyTorch starts from lockstep's (a one-step lockstep run at lr 0 writes them, torch_gpt.py
#              --init-from reads them), so the curves differ only by dropout's masks and rounding (with
#              model.dropout 0 the two agreed to 4 decimals over the first 14 steps on a CPU, a loss
#              spike at step 9 included)
# Prints the train loss every LOG_EVERY steps (that step's loss, as steps_per_print logs it) of both,
# then the validation losses and their relative difference; the target is within 2% after 2,000 steps.
# On an H100 2,000 steps should take well under a minute a side, plus start-up (estimate, not yet run).
set -euo pipefail
arg=${1:-build}
steps=${2:-2000}
every=${3:-100}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
device=${DEVICE:-cpu}
case $device in cpu | cuda) ;; *) echo "gpt_val_loss: DEVICE=$device: cpu or cuda" >&2; exit 2 ;; esac
init=${INIT:-own}
case $init in own | same) ;; *) echo "gpt_val_loss: INIT=$init: own or same" >&2; exit 2 ;; esac
precision=${PRECISION:-f32}
case $precision in
  f32 | fp32) precision=f32 ours_precision=() theirs_precision=fp32 ;;
  bf16) ours_precision=(--set bf16.enabled=true) theirs_precision=bf16 ;;
  *) echo "gpt_val_loss: PRECISION=$precision: f32 or bf16" >&2; exit 2 ;;
esac
export OMP_NUM_THREADS=1 LOCKSTEP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ -n "${OUT_DIR:-}" ]; then
  mkdir -p "$OUT_DIR" && work=$(cd "$OUT_DIR" && pwd)
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

build=$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")
corpus=${CORPUS:-}
if [ -n "$corpus" ] && [ -d "$corpus" ]; then corpus=$(cd "$corpus" && pwd); fi
host_ld=${LD_LIBRARY_PATH-}  # python's library path: the machine's own
if [ -x "$build/bin/lockstep" ] || { [ ! -d "$build" ] && [ -f "$build.tar.xz" ]; }; then
  # The GPU bundle: gpu_bench_start unpacks it where only the archive came, puts its libraries on
  # LD_LIBRARY_PATH for lockstep's programs and leaves $host_ld without them for python3 (PyTorch must
  # not load the build machine's libstdc++); it prints the GPU.
  cd "$root"
  # shellcheck source=bench/scripts/gpu_bench.sh
  source bench/scripts/gpu_bench.sh
  OUT_DIR=$work gpu_bench_start "$build" || exit 2
  bin=$build/bin
  order_bin=$bin/bench_train_order
  python=${PYTHON:-python3}
  default_corpus=$build/data/fortunes
else
  build=$(cd "$build" && pwd)
  bin=$build
  order_bin=$build/bench/bench_train_order
  # shellcheck source=bench/scripts/peer.sh
  source "$here/scripts/peer.sh"
  peer_python "$build" gpt_val_loss.bench
  default_corpus=/usr/share/games/fortunes
fi
for prog in "$bin/lockstep" "$order_bin"; do
  [ -x "$prog" ] || { echo "gpt_val_loss: no $prog (not built? a bundle from before scripts/gpu-check.sh packed it?)" >&2; exit 2; }
done
corpus=${corpus:-$default_corpus}
if [ ! -d "$corpus" ]; then
  echo "gpt_val_loss: CORPUS=$corpus is not a directory of text files (both sides read a directory: Debian's" \
    "fortunes, apt-get install fortunes; on the GPU machine the bundle's copy, packed by scripts/gpu-check.sh" \
    "where /usr/share/games/fortunes exists)" >&2
  exit 2
fi
block=256
batch=8

hostpy() { LD_LIBRARY_PATH=$host_ld "$@"; }
# One start of the peer's python (importing PyTorch takes seconds): the training windows, counted as both
# sides count them ((train tokens - 1) / block, train = 90%), whether the device is there, the versions.
probe=$(cd "$here/scripts" && hostpy "$python" -c 'import sys, torch, torch_gpt
cuda = sys.argv[1] == "cuda" and torch.cuda.is_available()
t = torch_gpt.corpus(sys.argv[2])
print((int(len(t) * (1.0 - 0.1)) - 1) // int(sys.argv[3]), int(sys.argv[1] == "cpu" or cuda), torch.__version__,
      torch.cuda.get_device_name() if cuda else "")' "$device" "$corpus" "$block") ||
  { echo "gpt_val_loss: $python could not import torch_gpt.py (torch) or read CORPUS=$corpus" >&2; exit 2; }
read -r windows device_ok torch_version gpu_name <<<"$probe"
[ "$device_ok" = 1 ] || { echo "gpt_val_loss: DEVICE=cuda but $python's torch $torch_version sees no GPU" >&2; exit 2; }
steps_per_epoch=$(((windows + batch - 1) / batch))
epochs=$(((steps + steps_per_epoch - 1) / steps_per_epoch))
eval_at=$(hostpy python3 -c "import sys; s, e = int(sys.argv[1]), int(sys.argv[2]); \
print(','.join(str(v) for v in sorted({*range(e, s, e), s})))" "$steps" "$steps_per_epoch")
"$order_bin" --samples "$windows" --batch $batch --steps "$steps" --seed 1 >"$work/order.txt"
if [ "$device" = cpu ]; then
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); torch: $torch_version; $precision"
else
  echo "GPU: $gpu_name; torch: $torch_version; $precision"
fi
echo "corpus $corpus: $windows training windows, $steps_per_epoch steps per epoch; validation after steps $eval_at"

ours_cmd=("$bin/lockstep" train "$root/examples/configs/gpt_fortunes.yaml" --output-dir "$work/ours"
  --set device="$device" --set data.root="$corpus" "${ours_precision[@]}"
  --set max_steps="$steps" --set epochs="$epochs" --set steps_per_print="$every"
  --set checkpoint.every_steps=0 --set tensorboard.enabled=false --set sample.max_new_tokens=0)
theirs_cmd=("$python" "$here/scripts/torch_gpt.py" --corpus "$corpus" --device "$device"
  --precision "$theirs_precision" --block-size "$block" --batch-size "$batch" --max-steps "$steps" --warmup-steps 0
  --attention mingpt --order-file "$work/order.txt" --eval-at "$eval_at" --log-every "$every")
fail() { echo "$1 failed (log: $2):"; tail -20 "$2"; exit 1; }
if [ "$init" = same ]; then
  # One step at lr 0 leaves AdamW's parameters as they were built: lockstep's initial weights.
  "$bin/lockstep" train "$root/examples/configs/gpt_fortunes.yaml" --output-dir "$work/init" \
    --set device="$device" --set data.root="$corpus" --set max_steps=1 --set optimizer.params.lr=0 \
    --set checkpoint.every_steps=0 --set tensorboard.enabled=false --set sample.max_new_tokens=0 \
    >"$work/init.log" 2>&1 || fail "lockstep train (the initial weights)" "$work/init.log"
  theirs_cmd+=(--init-from "$work/init/model.safetensors")
  echo "PyTorch starts from lockstep's initial weights ($work/init/model.safetensors)"
fi
if [ "$device" = cpu ]; then
  taskset -c 0 "${ours_cmd[@]}" >"$work/ours.log" 2>&1 &
  ours=$!
  LD_LIBRARY_PATH=$host_ld taskset -c $(($(nproc --all) > 1 ? 1 : 0)) "${theirs_cmd[@]}" >"$work/theirs.log" 2>&1 &
  theirs=$!
  wait $ours || fail "lockstep train" "$work/ours.log"
  wait $theirs || fail "torch_gpt.py" "$work/theirs.log"
else
  t0=$SECONDS
  "${ours_cmd[@]}" >"$work/ours.log" 2>&1 || fail "lockstep train" "$work/ours.log"
  t1=$SECONDS
  hostpy "${theirs_cmd[@]}" >"$work/theirs.log" 2>&1 || fail "torch_gpt.py" "$work/theirs.log"
  echo "lockstep train took $((t1 - t0)) s, torch_gpt.py $((SECONDS - t1)) s (start-up and validation included)"
fi

hostpy python3 - "$work/ours/metrics.csv" "$work/theirs.log" "$work/ours.log" <<'PY'
import csv, re, sys
ours_train, ours_val = {}, {}
for row in csv.reader(open(sys.argv[1])):
    if len(row) < 4 or not row[1].isdigit():
        continue
    if row[2] == "train/loss":
        ours_train[int(row[1])] = float(row[3])
    elif row[2] == "val/loss":
        ours_val[int(row[1])] = float(row[3])
theirs_train, theirs_val = {}, {}
for line in open(sys.argv[2]):
    m = re.match(r"(train|val) step=(\d+) (?:val_)?loss=([0-9.]+)", line)
    if m:
        (theirs_train if m[1] == "train" else theirs_val)[int(m[2])] = float(m[3])
if not ours_val or not theirs_val:
    sys.exit("no validation losses found: " + open(sys.argv[3]).read()[-2000:])
print(f"{'step':>6} {'lockstep train':>15} {'torch train':>12}")
for s in sorted(ours_train):
    print(f"{s:>6} {ours_train[s]:>15.4f} {theirs_train.get(s, float('nan')):>12.4f}")
print(f"{'step':>6} {'lockstep val':>15} {'torch val':>12} {'lockstep/torch - 1':>20}")
for s in sorted(ours_val):
    t = theirs_val.get(s, float("nan"))
    print(f"{s:>6} {ours_val[s]:>15.4f} {t:>12.4f} {100 * (ours_val[s] / t - 1):>+19.2f}%")
PY
# The models and checkpoints stay out of OUT_DIR's logs (a GPU session brings back its logs only).
rm -rf "$work"/{init,ours}/checkpoints "$work"/{init,ours}/model.safetensors
