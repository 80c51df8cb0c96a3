#!/usr/bin/env bash
# Sharded parameter-server throughput (issue 52) beside the transport's own
# bandwidth, in the same run: bench/rpc_bench's 64 MiB and 1 MiB tensor
# echoes (the floor a push or pull of rows could reach), then bench/ps_bench
# against 1, 2 and 4 servers — on the default same-host path and forced onto
# TCP (TESSERA_TENSORPIPE_SAME_HOST=tcp, the path between hosts); then a
# table of 10 M rows x 64 (2.56 GB) over 1 and 2 servers, same-host: the
# time to make its rows, and pulls and pushes of keys spread over all of it;
# and bench/embedding_table_bench: the hybrid example's RRef EmbeddingTable
# against a sparse table, lookups and lookups with their update.
# RUNS rounds; quote the range of the rounds.
#   bench/compare_ps.sh [runs=3] [seconds per point=1]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECONDS_PER_POINT=${2:-1}
bazel build //bench:ps_bench //bench:rpc_bench //bench:embedding_table_bench //launcher:tessera-run \
  >/dev/null 2>&1
export TESSERA_JOB_SECRET="bench-$$-$RANDOM"
for ((run = 1; run <= RUNS; run++)); do
  for path in same-host tcp; do
    env=()
    [[ $path == tcp ]] && env=(TESSERA_TENSORPIPE_SAME_HOST=tcp)
    echo "run $run, $path: echo $(env "${env[@]}" bazel-bin/bench/rpc_bench \
      ${env:+--same-host=tcp} | grep -o '"gbps_1mb": [0-9.]*, "gbps_64mb": [0-9.]*')"
    for servers in 1 2 4; do
      env "${env[@]}" bazel-bin/launcher/tessera-run --standalone --nproc_per_node $((servers + 1)) \
        bazel-bin/bench/ps_bench --seconds "$SECONDS_PER_POINT" 2>&1 |
        sed -n "s/^\[rank [0-9]*\] /run $run, $path, $servers servers: /p"
    done
  done
  for servers in 1 2; do
    bazel-bin/launcher/tessera-run --standalone --nproc_per_node $((servers + 1)) \
      bazel-bin/bench/ps_bench --seconds "$SECONDS_PER_POINT" --rows 10000000 2>&1 |
      sed -n "s/^\[rank [0-9]*\] /run $run, 10 M rows, $servers servers: /p"
  done
  bazel-bin/launcher/tessera-run --standalone --nproc_per_node 2 bazel-bin/bench/embedding_table_bench \
    --seconds "$SECONDS_PER_POINT" 2>&1 | sed -n "s/^\[rank 1\] /run $run, embedding table: /p"
done
