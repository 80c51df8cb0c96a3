#!/usr/bin/env bash
# The parameter-server example on one host and over three network hosts
# (network namespaces joined by a bridge, each host in its own PID namespace
# too, as tests/testing/network_hosts.h makes them), the same command line
# on each: prints both wall times. Needs root. Usage:
#   bench/multihost_ps.sh [example flags, e.g. --epochs 1]
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //launcher:tessera-run //examples/parameter_server >/dev/null 2>&1
RUN=bazel-bin/launcher/tessera-run
PS=bazel-bin/examples/parameter_server/parameter_server
P=tsrbench$$
export TESSERA_JOB_SECRET="bench-$$-$RANDOM"

cleanup() {
  for ns in ${P}h0 ${P}h1 ${P}h2 ${P}sw; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT

ip netns add ${P}sw
ip -n ${P}sw link add br0 type bridge
ip -n ${P}sw link set br0 up
for h in 0 1 2; do
  ip netns add ${P}h$h
  ip -n ${P}sw link add h$h type veth peer name eth0 netns ${P}h$h
  ip -n ${P}sw link set h$h master br0
  ip -n ${P}sw link set h$h up
  ip -n ${P}h$h link set lo up
  ip -n ${P}h$h addr add 10.88.0.$((h + 1))/24 dev eth0
  ip -n ${P}h$h link set eth0 up
done

start=$(date +%s%N)
"$RUN" --standalone --nproc_per_node 3 "$PS" "$@" | grep -E "test accuracy" || true
one_host=$(( ($(date +%s%N) - start) / 1000000 ))

start=$(date +%s%N)
for h in 0 1 2; do
  ip netns exec ${P}h$h unshare --pid --fork --kill-child \
    "$RUN" --nnodes 3 --node_rank $h --nproc_per_node 1 --master_addr 10.88.0.1 \
    --master_port 29500 "$PS" "$@" > /tmp/${P}_h$h.log 2>&1 &
done
wait
three_hosts=$(( ($(date +%s%N) - start) / 1000000 ))
grep -hE "test accuracy" /tmp/${P}_h*.log || true
rm -f /tmp/${P}_h*.log
echo "one host: ${one_host} ms; three hosts: ${three_hosts} ms"
