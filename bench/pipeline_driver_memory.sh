#!/usr/bin/env bash
# Pipeline schedules: the examples/pipeline job (driver + 2 stages) trained
# with Forward + distributed autograd ("forward"), and with
# PipelineDriver::Train under GPipe and 1F1B (see Note [Pipeline schedules]),
# for 4, 8 and 16 micro-batches; same data, seed and steps. Prints training
# throughput, the most micro-batches' activations alive at once per stage,
# and each stage process's peak resident memory (VmHWM).
# Usage: bench/pipeline_driver_memory.sh [batch] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${1:-512}
steps=${2:-20}
bazel build //examples/pipeline //launcher:tessera-run 2>/dev/null
printf '%-14s %-9s %12s %18s %22s\n' micro-batches schedule samples/s "peak alive (s1,s2)" "peak MiB (s1, s2)"
for micro in 4 8 16; do
  for schedule in forward gpipe 1f1b; do
    out=$(bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3 \
      bazel-bin/examples/pipeline/pipeline --epochs 1 --batch "$batch" --max_steps "$steps" \
      --log_every 1000 --micro_batches "$micro" --schedule "$schedule" 2>&1)
    rate=$(sed -n 's/.*training \([0-9]*\) samples\/s.*/\1/p' <<<"$out")
    alive=$(sed -n 's/.*at most \([0-9]*\) and \([0-9]*\) micro-batches.*/\1,\2/p' <<<"$out")
    mib=$(sed -n "s/.*peak memory \([0-9.]*\) and \([0-9.]*\) MiB.*/\1, \2/p" <<<"$out")
    printf '%-14s %-9s %12s %18s %22s\n' "$micro" "$schedule" "$rate" "${alive:--}" "${mib:--}"
  done
done
