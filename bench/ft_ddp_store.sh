#!/usr/bin/env bash
# Fault-tolerant DDP's cost per step by store (issue 31): the same job
# (3 replicas on one host, 300 steps) with node 0's built-in store, with an
# etcd of one member, and with an etcd of three members (tessera-run --store
# etcd://...), all on this machine; then the three-member etcd again with
# one member SIGKILLed at step ~100: how long the replicas stall.
# Prints, per run, the wall time and the quorum-and-commit time per step the
# replicas report. Usage: bench/ft_ddp_store.sh [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
bazel build //launcher:tessera-run //examples/fault_tolerant_ddp >/dev/null 2>&1
RUN=bazel-bin/launcher/tessera-run
FT=bazel-bin/examples/fault_tolerant_ddp/fault_tolerant_ddp
TMP=$(mktemp -d)
trap 'pkill -9 -f "data-dir $TMP" || true; rm -rf "$TMP"' EXIT
export TESSERA_JOB_SECRET=bench-ft-ddp-store
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

# etcd_cluster N: starts N members on 127.0.0.1; prints the etcd:// endpoints.
etcd_cluster() {
  local n=$1 peers="" endpoints="" i
  local -a cports pports
  for ((i = 0; i < n; i++)); do
    cports[i]=$(free_port)
    pports[i]=$(free_port)
    peers+="${peers:+,}m$i=http://127.0.0.1:${pports[i]}"
    endpoints+="${endpoints:+,}127.0.0.1:${cports[i]}"
  done
  for ((i = 0; i < n; i++)); do
    etcd --name "m$i" --data-dir "$TMP/etcd$n/m$i" \
      --listen-client-urls "http://127.0.0.1:${cports[i]}" \
      --advertise-client-urls "http://127.0.0.1:${cports[i]}" \
      --listen-peer-urls "http://127.0.0.1:${pports[i]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${pports[i]}" \
      --initial-cluster "$peers" --initial-cluster-token "$TMP$n" >"$TMP/etcd$n-m$i.log" 2>&1 &
  done
  echo "etcd://$endpoints"
}

# run NAME [--store URL]: one job; prints NAME, wall seconds, ms per step.
run() {
  local name=$1 start
  shift
  start=$(now)
  "$RUN" --standalone --nproc_per_node 3 --elastic_roles replica --max_restarts 1 "$@" \
    "$FT" --steps "$STEPS" --log_every 25 >"$TMP/$name.log" 2>&1
  local wall ms
  wall=$(echo "$(now) - $start" | bc)
  ms=$(grep -o 'quorum and commit waited [0-9.]* ms' "$TMP/$name.log" |
       awk '{s += $5} END {printf "%.1f", s / NR}')
  printf '%-28s wall %6.1f s   quorum and commit %6.1f ms/step   %s\n' "$name" "$wall" "$ms" \
    "$(grep -o 'parameters [0-9a-f]*' "$TMP/$name.log" | sort -u | tr '\n' ' ')"
}

one=$(etcd_cluster 1)
three=$(etcd_cluster 3)
sleep 3  # elections
run builtin
run etcd-1-member --store "$one/one"
run etcd-3-members --store "$three/three"

# A member dies mid-run: the wall time beyond the undisturbed run above is
# what the stall cost (an election, and etcd's answer to proposals the dead
# leader held: "request timed out" after ~7 s).
( while (($(grep -c "step " "$TMP/etcd-3-member-0-killed.log" 2>/dev/null || true) < 12)); do
    sleep 0.05
  done
  pkill -9 -f "name m0 --data-dir $TMP/etcd3/" ) &
run "etcd-3-member-0-killed" --store "$three/kill"
wait
