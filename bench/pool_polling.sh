#!/usr/bin/env bash
# The worker pool's polling (see Note [Pool threads spin, then sleep],
# common/thread_pool.cc) on real work, on micro-benchmarks and at rest:
#   - the main job (parameter server + 2 trainers, tessera-run --standalone,
#     1 epoch) with the defaults, with the pool's polling off
#     (TESSERA_WORKER_SPIN_US=0) and with every same-host option and the
#     polling off (TCP), alternating, ROUNDS rounds (default 2);
#   - bench/rpc_bench on the same-host path, forced TCP and the gRPC
#     backend, polling off and on, interleaved, 4 rounds;
#   - the CPU an idle worker uses in 10 s, polling on and off;
#   - bench/wake_latency, the cost polling avoids.
# Prints one line per run. Usage: bench/pool_polling.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //launcher:tessera-run //examples/parameter_server //bench:rpc_bench \
    //bench:idle_worker //bench:wake_latency 2>/dev/null
log=$(mktemp)
for ((round = 1; round <= ${1:-2}; round++)); do
  for config in "unix 100" "unix 0" "tcp 0"; do
    read -r transport spin <<<"$config"
    start=$(date +%s.%N)
    TESSERA_WORKER_SPIN_US=$spin TESSERA_TENSORPIPE_SAME_HOST=$transport \
        bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3 --elastic_roles trainer \
        bazel-bin/examples/parameter_server/parameter_server --epochs 1 >"$log" 2>&1
    end=$(date +%s.%N)
    printf 'main job  %-4s polling %3s µs, round %d: %.1f s wall, %s\n' "$transport" "$spin" \
        "$round" "$(echo "$end - $start" | bc)" "$(grep -o 'test accuracy [0-9.]*%' "$log")"
  done
done
rm -f "$log"
for _ in 1 2 3 4; do
  for spin in 0 100; do
    for path in "" --same-host=tcp --grpc; do
      printf 'rpc_bench %-15s polling %3s µs: %s\n' "${path:-same-host}" "$spin" \
          "$(TESSERA_WORKER_SPIN_US=$spin bazel-bin/bench/rpc_bench $path 2>/dev/null | tail -n 1)"
    done
  done
done
for spin in 100 0; do
  echo "idle      polling $spin µs: $(TESSERA_WORKER_SPIN_US=$spin bazel-bin/bench/idle_worker 10)"
done
echo "wake      $(bazel-bin/bench/wake_latency)"
