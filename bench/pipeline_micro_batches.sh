#!/usr/bin/env bash
# Pipeline concurrency: the examples/pipeline job (driver + 2 stages) with 1,
# 2, 4 and 8 micro-batches per batch, same data and steps; prints training
# throughput for each. Usage: bench/pipeline_micro_batches.sh [batch] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${1:-256}
steps=${2:-60}
bazel build //examples/pipeline //launcher:tessera-run 2>/dev/null
for micro in 1 2 4 8; do
  bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3 \
    bazel-bin/examples/pipeline/pipeline --epochs 1 --batch "$batch" --max_steps "$steps" \
    --log_every 1000 --micro_batches "$micro" 2>&1 |
    sed -n 's/.*training \([0-9]*\) samples\/s with \([0-9]*\) micro-batches.*/micro-batches \2: \1 samples\/s/p'
done
