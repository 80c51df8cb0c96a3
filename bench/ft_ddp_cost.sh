#!/usr/bin/env bash
# What fault tolerance costs a data-parallel step over three network hosts
# (issue 51): the same CNN, batch, optimizer and step count as plain DDP
# (examples/ddp_fashion_mnist: DistributedDataParallel over Gloo, one rank
# per host) and as fault-tolerant DDP (examples/fault_tolerant_ddp, a
# replica per host) with node 0's built-in store and with a three-member
# etcd cluster, a member on each host. Runs the three in turn, ROUNDS
# times, and prints each run's ms per step (plain DDP: batch / samples/s
# per rank; fault-tolerant: the training loop's wall time / attempts) and
# its ratio to the plain DDP run of the same round.
# The hosts are network namespaces joined by a bridge, each host in its own
# PID namespace, as tests/testing/network_hosts.h makes them. Needs root.
#   bench/ft_ddp_cost.sh [steps=300] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
ROUNDS=${2:-3}
bazel build //launcher:tessera-run //examples/fault_tolerant_ddp //examples/ddp_fashion_mnist \
  >/dev/null 2>&1
RUN=$PWD/bazel-bin/launcher/tessera-run
FT=$PWD/bazel-bin/examples/fault_tolerant_ddp/fault_tolerant_ddp
DDP=$PWD/bazel-bin/examples/ddp_fashion_mnist/ddp_fashion_mnist
P=tsrft$$
TMP=$(mktemp -d)
export TESSERA_JOB_SECRET="bench-$$-$RANDOM"
addr() { echo "10.89.0.$(($1 + 1))"; }

source bench/network_hosts.sh
trap 'hosts_down $P; rm -rf "$TMP"' EXIT
hosts_up $P 89

# etcd: a member per host (peer port 2380, client port 2379).
cluster="" endpoints=""
for h in 0 1 2; do
  cluster+="${cluster:+,}m$h=http://$(addr $h):2380"
  endpoints+="${endpoints:+,}$(addr $h):2379"
done
for h in 0 1 2; do
  ip netns exec ${P}h$h etcd --name m$h --data-dir "$TMP/etcd-m$h" \
    --listen-client-urls "http://$(addr $h):2379" --advertise-client-urls "http://$(addr $h):2379" \
    --listen-peer-urls "http://$(addr $h):2380" --initial-advertise-peer-urls "http://$(addr $h):2380" \
    --initial-cluster "$cluster" --initial-cluster-token "$P" >"$TMP/etcd-m$h.log" 2>&1 &
  disown  # killed by cleanup; `wait` in on_hosts waits for the jobs' own pids
done

# on_hosts NAME LAUNCHER_ARGS... -- PROGRAM ARGS...: one job, a node per
# host; each host's output in $TMP/NAME.h<host>.
on_hosts() {
  local name=$1 h
  shift
  local -a launcher=() program=()
  while [[ $1 != -- ]]; do launcher+=("$1"); shift; done
  shift
  program=("$@")
  local -a pids=()
  for h in 0 1 2; do
    ip netns exec ${P}h$h unshare --pid --fork --kill-child \
      "$RUN" --nnodes 3 --node_rank $h --nproc_per_node 1 --master_addr "$(addr 0)" \
      --master_port 29500 "${launcher[@]}" "${program[@]}" >"$TMP/$name.h$h" 2>&1 &
    pids+=($!)
  done
  local pid failed=false
  for pid in "${pids[@]}"; do wait "$pid" || failed=true; done
  if $failed; then
    echo "$name failed:"
    tail -20 "$TMP/$name".h*
    exit 1
  fi
}

# CPU seconds the etcd members have used so far (ticks of utime + stime).
etcd_cpu() {
  local ticks=0 pid
  for pid in $(pgrep -x etcd); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "scale=3; $ticks / $(getconf CLK_TCK)" | bc
}

# Mean over the hosts of a number the jobs print.
mean() { grep -ho "$1" "$TMP/$2".h* | grep -o '[0-9.]*' | awk '{s += $1} END {printf "%.1f", s / NR}'; }

BATCH=64
printf '%-6s %-34s %9s %7s\n' round configuration "ms/step" "× DDP"
for ((round = 1; round <= ROUNDS; round++)); do
  on_hosts "ddp$round" -- "$DDP" --epochs 1 --max_steps "$STEPS" --batch $BATCH
  rate=$(mean '[0-9.]* samples/s per rank' "ddp$round")
  plain=$(echo "scale=2; 1000 * $BATCH / $rate" | bc)
  printf '%-6s %-34s %9.1f %7s\n' "$round" "plain DDP (Gloo)" "$plain" "1.00"
  for store in builtin etcd; do
    args=(--elastic_roles replica --max_restarts 0)
    [[ $store == etcd ]] && args+=(--store "etcd://$endpoints/ft$round")
    cpu=$(etcd_cpu)
    on_hosts "ft-$store$round" "${args[@]}" -- "$FT" --steps "$STEPS" --batch $BATCH --log_every 100
    ms=$(mean 'a step took [0-9.]* ms' "ft-$store$round")
    waited=$(mean 'commit waited [0-9.]* ms' "ft-$store$round")
    etcd_ms=$(echo "1000 * ($(etcd_cpu) - $cpu) / $STEPS" | bc)
    printf '%-6s %-34s %9.1f %7.2f   (waited for the quorum and claim: %s ms; etcd CPU: %s ms a step)\n' \
      "$round" "fault-tolerant DDP, $store store" "$ms" "$(echo "$ms / $plain" | bc -l)" "$waited" \
      "$etcd_ms"
  done
done
