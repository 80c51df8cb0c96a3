#!/usr/bin/env bash
# Checkpoint save and load (checkpoint/checkpoint.h) against PyTorch 1.13's
# torch.save / torch.load of the same tensor with the same fsync, and
# against the floor (the same bytes written and read raw), in the same run,
# RUNS times, alternating the sides. Results: docs/benchmarks.md.
#
#   bench/checkpoint.sh [RUNS=3] [MiB=1024] [DIR=a directory on the disk under test]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
mib=${2:-1024}
dir=${3:-$(mktemp -d "${TMPDIR:-/var/tmp}/tessera-checkpoint-bench.XXXXXX")}
bazel build //bench:checkpoint_bench >/dev/null 2>&1
bin=bazel-bin/bench/checkpoint_bench
for run in $(seq "$runs"); do
  echo "run $run tessera: $("$bin" "$dir" "$mib" 3)"
  echo "run $run pytorch: $(/usr/bin/python3 bench/torch_checkpoint_bench.py "$dir" "$mib" 3)"
done
