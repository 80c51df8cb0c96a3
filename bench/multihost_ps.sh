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

source bench/network_hosts.sh
trap 'hosts_down $P' EXIT
hosts_up $P 88

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
