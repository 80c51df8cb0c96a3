#!/usr/bin/env bash
# The same-host transport on real work and at rest (issue 32):
#   - the main job (parameter server + 2 trainers, tessera-run --standalone,
#     1 epoch) under each same-host transport — unix (the default: guarded
#     Unix sockets, cma), shm (TensorPipe's busy-polling shm, cma) and tcp
#     (every same-host option off) — alternating, ROUNDS rounds (default 2);
#   - the CPU an idle worker uses in 10 s under each (one server, one
#     client that made a call, then nothing);
#   - bench/rpc_bench under each, for latency, calls/s and bandwidth.
# Prints one line per run. Usage: bench/same_host_transport.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //launcher:tessera-run //examples/parameter_server //bench:rpc_bench \
    //bench:idle_worker 2>/dev/null
transports=(unix shm tcp)
for ((round = 1; round <= ${1:-2}; round++)); do
  for t in "${transports[@]}"; do
    start=$(date +%s.%N)
    TESSERA_TENSORPIPE_SAME_HOST=$t bazel-bin/launcher/tessera-run --standalone \
        --nproc_per_node 3 --elastic_roles trainer \
        bazel-bin/examples/parameter_server/parameter_server --epochs 1 >/tmp/same_host_$t.log 2>&1
    end=$(date +%s.%N)
    accuracy=$(grep -o 'test accuracy [0-9.]*%' /tmp/same_host_$t.log)
    printf 'main job  %-4s round %d: %.1f s wall, %s\n' "$t" "$round" "$(echo "$end - $start" | bc)" \
        "$accuracy"
  done
done
for t in "${transports[@]}"; do
  echo "idle      $t: $(TESSERA_TENSORPIPE_SAME_HOST=$t bazel-bin/bench/idle_worker 10)"
done
for t in "${transports[@]}"; do
  echo "rpc_bench $t: $(bazel-bin/bench/rpc_bench --same-host=$t 2>/dev/null)"
done
