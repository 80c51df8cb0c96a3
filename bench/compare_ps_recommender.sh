#!/usr/bin/env bash
# The recommender's training throughput (issue 52), like with like, in the
# same run: examples/ps_recommender on 2 servers + 2 trainers (each
# consistency) against the same model, rows and row optimizers in one
# process (--servers 0, 1 and 2 compute threads: the machine's cores), and
# against PyTorch 1.13's RPC with the model split the same way
# (bench/torch_ps_recommender.py: trainers compute, RPC lookups inside
# distributed autograd, a DistributedOptimizer stepping Adagrad on the
# servers, asynchronous like --consistency async), on the same samples
# (bench/click_data_writer). One process per rank, 1 compute thread each.
# A job's samples/s is its trainers' summed. RUNS rounds; quote the range.
#   bench/compare_ps_recommender.sh [runs=3]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
bazel build //examples/ps_recommender //bench:click_data_writer //launcher:tessera-run >/dev/null 2>&1
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
bazel-bin/bench/click_data_writer "$data"
export TESSERA_JOB_SECRET="bench-$$-$RANDOM"
program=bazel-bin/examples/ps_recommender/ps_recommender
summary_awk="$(pwd)/bench/recommender_summary.awk"
summary() { awk -f "$summary_awk"; }
for ((run = 1; run <= RUNS; run++)); do
  for threads in 1 2; do
    echo "run $run, one process, $threads threads: $($program --servers 0 --threads $threads \
      --log_every 1000000 2>&1 | summary)"
  done
  for mode in async bounded sync; do
    echo "run $run, tessera 2 servers + 2 trainers, $mode: $(bazel-bin/launcher/tessera-run \
      --standalone --nproc_per_node 4 $program --servers 2 --consistency $mode \
      --log_every 1000000 2>&1 | summary)"
  done
  echo "run $run, torch 2 servers + 2 trainers, async: $(cd bench &&
    /usr/bin/python3 torch_ps_recommender.py "$data" 2>&1 | summary)"
done
