#!/usr/bin/env bash
# The bubble of each pipeline schedule (pipeline/schedules.h) as run, beside
# what the plan promises on paper: examples/pipeline_transformer (a ViT on
# Fashion-MNIST cut into p x v stages) traced for STEPS steps under GPipe,
# 1F1B, Interleaved 1F1B (v = 2), ZB-H1 and ZBV, p in {2, 4}, m in {4, 8, 16};
# same data, seed and steps. Per run: the time a step takes, the stage
# workers' idle share of a step from the traces (tessera-trace bubble; the
# first step left out), the idle share on paper (SimulatePlan) with F, B and
# W alike and with the mean F, B and W the run measured (bench/plan_on_paper;
# transfers taken as free), the most micro-batches' activations a worker
# holds (from the plan, which the workers follow), and the mean F, B and W.
# Results: docs/benchmarks.md.
#
#   bench/pipeline_schedules.sh [STEPS=12] [BATCH=128] [P="2 4"] [M="4 8 16"]
#
# PyTorch 1.13 has no counterpart to run beside it: its pipeline
# (torch.distributed.pipeline.sync.Pipe) is GPipe within one process, and the
# schedules of torch.distributed.pipelining came later, for SPMD programs.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
batch=${2:-128}
workers=${3:-2 4}
micro_batches=${4:-4 8 16}
bazel build //examples/pipeline_transformer //launcher:tessera-run //bench:plan_on_paper \
  >/dev/null 2>&1
trace=$(mktemp -d "${TMPDIR:-/tmp}/tessera-pipeline-bench.XXXXXX")
trap 'rm -rf "$trace"' EXIT
printf '%-12s %2s %2s %3s %9s %11s %13s %16s %5s  %s\n' schedule p v m "ms/step" "idle (run)" \
  "idle (paper)" "(measured costs)" held "mean action"
for p in $workers; do
  for m in $micro_batches; do
    for run in gpipe:1 1f1b:1 interleaved:2 zb-h1:1 zbv:2; do
      schedule=${run%:*} v=${run#*:}
      rm -rf "$trace"/*
      out=$(bazel-bin/launcher/tessera-run --standalone --nproc_per_node $((p + 1)) \
        --trace "$trace" bazel-bin/examples/pipeline_transformer/pipeline_transformer \
        --schedule "$schedule" --stages "$p" --chunks "$v" --micro_batches "$m" \
        --batch "$batch" --epochs 1 --max_steps "$steps" --log_every 1000 --test_images 100 2>&1) ||
        { echo "$schedule p=$p m=$m failed:"; tail -5 <<<"$out"; continue; }
      paper=$(sed -n 's/.*idle share \([0-9.]*\), at most \([0-9]*\) micro.*/\1 \2/p' <<<"$out")
      measured=$(scripts/tessera-trace bubble "$trace")
      ms=$(sed -n 's/^[0-9]* steps: \([0-9.]*\) ms a step.*/\1/p' <<<"$measured")
      idle=$(sed -n 's/^  mean idle \([0-9.]*\)/\1/p' <<<"$measured")
      actions=$(sed -n 's/^  mean action: //p' <<<"$measured")
      read -r f b w < <(sed -n 's/^  costs F B W: //p' <<<"$measured")
      costed=$(bazel-bin/bench/plan_on_paper "$schedule" "$p" "$v" "$m" "$f" "$b" "$w")
      costed=${costed#idle } costed=${costed%% *}
      printf '%-12s %2s %2s %3s %9s %11s %13s %16s %5s  %s\n' "$schedule" "$p" "$v" "$m" "$ms" \
        "$idle" "${paper% *}" "$costed" "${paper#* }" "$actions"
    done
  done
done
