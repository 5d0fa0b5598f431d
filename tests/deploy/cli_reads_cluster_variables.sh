#!/usr/bin/env bash
# The cluster's variables as the CLI reads them (docs/deploy.md): `lockstep train` takes torchrun's
# PET_NPROC_PER_NODE and PET_MAX_RESTARTS as the defaults of --nproc-per-node and --max-restarts (a
# flag wins), names a bad one, and refuses PET_NNODES above 1 (a job across nodes is `lockstep
# run`'s); `lockstep run` in an old Kubeflow operator's pod (RANK/WORLD_SIZE, no PET_NNODES) says
# that it runs the node alone. (`lockstep run`'s PET_* rules: tests/launch/launch_options_test.cpp.)
# Only the variables under test are in each run's environment.
#   cli_reads_cluster_variables.sh LOCKSTEP_BIN WORK_DIR
set -euo pipefail

lockstep=$1 work=$2
fail() { echo "cli_reads_cluster_variables: FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cat >"$work/config.yaml" <<'YAML'
model: mlp
data: {dataset: synthetic, size: 64, test_size: 16}
train_micro_batch_size_per_gpu: 8
epochs: 1
max_steps: 2
YAML

# train OUT VAR=VALUE... -- FLAGS...: exit code of `lockstep train` with only those variables.
train() {
  local out=$1 vars=()
  shift
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  env -i PATH=/usr/bin:/bin "${vars[@]}" "$lockstep" train "$work/config.yaml" --output-dir "$work/$out" "$@" \
    >"$work/$out.log" 2>&1
}
world_of() { sed -n 's/.*"world_size": *\([0-9]*\).*/\1/p' "$work/$1/summary.json" | head -n 1; }

train from_env PET_NPROC_PER_NODE=2 -- || { cat "$work/from_env.log" >&2; fail "PET_NPROC_PER_NODE=2 failed"; }
[ "$(world_of from_env)" = 2 ] || fail "PET_NPROC_PER_NODE=2 did not start 2 ranks"

train flag_wins PET_NPROC_PER_NODE=2 -- --nproc-per-node 1 || fail "--nproc-per-node 1 failed"
[ "$(world_of flag_wins)" = 1 ] || fail "--nproc-per-node 1 lost to PET_NPROC_PER_NODE=2"

# refused OUT VAR=VALUE PATTERN: the variable alone makes lockstep train exit 2 saying PATTERN.
refused() {
  local rc=0
  train "$1" "$2" -- || rc=$?
  if [ $rc -ne 2 ] || ! grep -q "$3" "$work/$1.log"; then
    fail "$2: exit $rc (expected 2, saying '$3'): $(cat "$work/$1.log")"
  fi
}
refused bad_nproc PET_NPROC_PER_NODE=two PET_NPROC_PER_NODE
refused bad_restarts PET_MAX_RESTARTS=-1 PET_MAX_RESTARTS
refused nodes PET_NNODES=2 "lockstep run"
# lockstep run with an old operator's pod variables: it runs, and says why it runs alone.
env -i PATH=/usr/bin:/bin WORLD_SIZE=2 RANK=1 MASTER_ADDR=mnist-master-0 MASTER_PORT=23456 \
  "$lockstep" run true >"$work/old_operator.log" 2>&1 || fail "lockstep run true: $(cat "$work/old_operator.log")"
grep -q 'WORLD_SIZE=2 and RANK=1 are set but.*not read.*older one pass --nnodes' "$work/old_operator.log" ||
  fail "no warning of the unread WORLD_SIZE/RANK: $(cat "$work/old_operator.log")"
# With the operator's PET_NNODES (v1.7 on), or as a launcher's rank (LOCAL_RANK), no warning.
for extra in PET_NNODES=1 LOCAL_RANK=0; do
  env -i PATH=/usr/bin:/bin WORLD_SIZE=2 RANK=1 "$extra" "$lockstep" run true >"$work/quiet.log" 2>&1 ||
    fail "lockstep run true with $extra: $(cat "$work/quiet.log")"
  if grep -q "WORLD_SIZE" "$work/quiet.log"; then fail "a warning with $extra: $(cat "$work/quiet.log")"; fi
done
echo "cli_reads_cluster_variables: PASS"
