#!/usr/bin/env bash
# Replicated parameter servers (issue 53), measured in one run:
#  - from ps0's fault to the next push acknowledged, seen by a trainer
#    pushing a row to each of 2 shards (bench/ps_failover_bench): SIGKILL
#    (connections reset: the backup waits out the old primary's lease,
#    failure_timeout / 5) and SIGSTOP (silence, as a lost machine's: the
#    backup waits out failure_timeout, 3 s);
#  - after the SIGKILL, ps0's restart rejoining every shard as a backup
#    (re-replication: a copy of each shard, then the changes made
#    meanwhile) while the trainer pushes on; and the same with 2 GiB of
#    rows (1 GiB a shard) filled in first (FILL_GIB=0 skips it);
#  - a checkpoint of every shard (PsClient::Checkpoint) while the trainer
#    trains on: from the request to every shard written, the slowest step
#    meanwhile; empty, then with FILL_GIB GiB of rows;
#  - the recommender's training throughput with each shard's 1 backup
#    against none (examples/ps_recommender, 2 servers + 2 trainers, async
#    and sync), like with like: same samples, same processes.
# One process per rank. RUNS rounds; quote the range.
#   bench/ps_failover.sh [runs=3]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
FILL_GIB=${FILL_GIB:-2}
bazel build //bench:ps_failover_bench //examples/ps_recommender //launcher:tessera-run >/dev/null 2>&1
export TESSERA_JOB_SECRET="bench-$$-$RANDOM"
run=bazel-bin/launcher/tessera-run
program=bazel-bin/examples/ps_recommender/ps_recommender
summary_awk="$(pwd)/bench/recommender_summary.awk"
summary() { awk -f "$summary_awk"; }
for ((r = 1; r <= RUNS; r++)); do
  for fault in kill stop; do
    echo "run $r, $($run --standalone --nproc_per_node 3 --elastic_roles server --max_restarts 1 \
      bazel-bin/bench/ps_failover_bench --fault $fault 2>&1 | grep -o 'fault .*\|re-repl.*')"
  done
  # A checkpoint of every shard while the trainer trains on, empty then
  # filled (the servers' files under a scratch folder, removed after).
  for gib in 0 "$FILL_GIB"; do
    dir=$(mktemp -d)
    echo "run $r, $($run --standalone --nproc_per_node 3 bazel-bin/bench/ps_failover_bench \
      --fault checkpoint --checkpoint_dir "$dir" --fill_gib "$gib" 2>&1 | grep -o 'checkpoint of.*')"
    rm -rf "$dir"
  done
  if [[ $FILL_GIB != 0 ]]; then
    echo "run $r, $($run --standalone --nproc_per_node 3 --elastic_roles server --max_restarts 1 \
      bazel-bin/bench/ps_failover_bench --fault kill --fill_gib "$FILL_GIB" 2>&1 |
      grep -o 're-repl.*')"
  fi
  for mode in async sync; do
    for backups in 0 1; do
      echo "run $r, recommender $mode, $backups backups: $($run --standalone --nproc_per_node 4 \
        $program --servers 2 --backups $backups --consistency $mode --log_every 1000000 2>&1 |
        summary)"
    done
  done
done
