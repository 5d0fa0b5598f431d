#!/usr/bin/env bash
# Seconds from a fault to the exit of every agent, with `lockstep run --timeout T` (default 20):
#   stop:  kill -STOP of rank 1 of 3 on one node, per backend (shm, gloo)
#   cut:   the link of node 1 of 2 (network namespaces on a bridge; needs root) goes down; gloo
#          with one worker per node, and auto (shm within a node, gloo across) with two
# Usage: bench/watchdog_timing.sh BUILD_DIR [TIMEOUT]
# Measured (2-core AMD EPYC VM, timeout 20): stop shm 20.0 s, stop gloo 20.0 s; cut gloo: master
# node 19.9-20.6 s, node 1 10.1 s; cut auto: master node 10.6 s, node 1 10.1 s. Every agent exits
# 1 naming the stopped rank, or the silent node (master) / the lost master (node 1).
set -u
build=${1:?build dir}; T=${2:-20}
run=$build/lockstep; worker=$build/tests/launch_test_pg_worker
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
waitfile() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

for backend in shm gloo; do
  d=$tmp/$backend; mkdir -p "$d"
  "$run" run --nproc-per-node 3 --standalone --timeout "$T" "$worker" --backend "$backend" \
    --loop-seconds 600 --pid-dir "$d" >"$d/out" 2>&1 &
  agent=$!
  waitfile "$d/pid.1" || { echo "$backend: workers did not start"; cat "$d/out"; continue; }
  sleep 1; kill -STOP "$(cat "$d/pid.1")"; t0=$(now)
  wait $agent; rc=$?; t1=$(now)
  printf 'stop %-5s timeout %ss: agent exit %d after %.1f s; %s\n' "$backend" "$T" "$rc" \
    "$(echo "$t1 - $t0" | bc)" "$(grep -m1 -o 'root cause: rank [0-9]* [^)]*) has been stopped[^:]*' "$d/out")"
done

[ "$(id -u)" = 0 ] || { echo "cut: skipped (needs root for network namespaces)"; exit 0; }
id=wdt$$; hub=${id}hub
ip netns add $hub; ip -n $hub link add br0 type bridge; ip -n $hub link set br0 up
for i in 0 1; do
  ip netns add ${id}h$i
  ip link add p$i netns $hub type veth peer name eth0 netns ${id}h$i
  ip -n $hub link set p$i master br0; ip -n $hub link set p$i up
  ip -n ${id}h$i addr add 10.231.0.$((i+1))/24 dev eth0; ip -n ${id}h$i link set eth0 up; ip -n ${id}h$i link set lo up
done
cleanup() { for ns in ${id}h0 ${id}h1 $hub; do ip netns pids $ns 2>/dev/null | xargs -r kill -9; ip netns del $ns 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
for cut in gloo:1 auto:2; do
backend=${cut%:*}; nproc=${cut#*:}
d=$tmp/cut$backend; mkdir -p "$d"
for i in 0 1; do
  ip netns exec ${id}h$i env LOCKSTEP_HOSTNAME=node$i LOCKSTEP_GLOO_HOSTNAME=10.231.0.$((i+1)) \
    "$run" run --nnodes 2 --node-rank $i --nproc-per-node $nproc --master-addr 10.231.0.1 \
    --master-port $((29511 + nproc)) --timeout "$T" --join-token timing-secret-0123456789 "$worker" \
    --backend $backend --loop-seconds 600 --pid-dir "$d" \
    >"$d/out$i" 2>&1 &
  eval "agent$i=\$!"
done
waitfile "$d/pid.0" && waitfile "$d/pid.$((2 * nproc - 1))" || { echo "cut: workers did not start"; cat "$d"/out*; exit 1; }
sleep 1; ip -n $hub link set p1 down; t0=$(now)
t_0=; t_1=  # each agent's own exit time (polled every 0.05 s)
while [ -z "$t_0" ] || [ -z "$t_1" ]; do
  [ -z "$t_0" ] && ! kill -0 $agent0 2>/dev/null && t_0=$(now)
  [ -z "$t_1" ] && ! kill -0 $agent1 2>/dev/null && t_1=$(now)
  sleep 0.05
done
wait $agent0; rc0=$?; wait $agent1; rc1=$?
printf "cut   %-5s timeout %ss: master node exit %d after %.1f s; node 1 exit %d after %.1f s\n" $backend "$T" \
  $rc0 "$(echo "$t_0 - $t0" | bc)" $rc1 "$(echo "$t_1 - $t0" | bc)"
echo "  master: $(grep -m1 -o 'node rank 1 on host [^:]*' "$d/out0")"
echo "  node 1: $(grep -m1 -o 'lost contact with the rendezvous store of the master node[^:]*' "$d/out1")"
ip -n $hub link set p1 up
done
