#!/usr/bin/env bash
# The README's picture of pipeline schedules: examples/pipeline_transformer
# traced under 1F1B and ZB-H1 at 4 workers and 8 micro-batches, each drawn
# beside its plan run on paper at the mean F, B and W the run measured
# (bench/plan_on_paper), one row per stage worker (tessera-trace timeline).
#
#   bench/pipeline_timeline.sh [OUTPUT=docs/pipeline_schedules_timeline.png]
set -euo pipefail
cd "$(dirname "$0")/.."
output=${1:-docs/pipeline_schedules_timeline.png}
bazel build //examples/pipeline_transformer //launcher:tessera-run //bench:plan_on_paper \
  >/dev/null 2>&1
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-pipeline-timeline.XXXXXX")
trap 'rm -rf "$work"' EXIT
panels=()
for run in 1f1b:1F1B zb-h1:ZB-H1; do
  schedule=${run%:*} title=${run#*:}
  bazel-bin/launcher/tessera-run --standalone --nproc_per_node 5 --trace "$work/$schedule" \
    bazel-bin/examples/pipeline_transformer/pipeline_transformer --schedule "$schedule" \
    --stages 4 --micro_batches 8 --batch 128 --epochs 1 --max_steps 4 --log_every 1000 \
    --test_images 100 >/dev/null 2>&1
  read -r f b w < <(scripts/tessera-trace bubble "$work/$schedule" | sed -n 's/^  costs F B W: //p')
  bazel-bin/bench/plan_on_paper "$schedule" 4 1 8 "$f" "$b" "$w" --trace="$work/$schedule.json" \
    >/dev/null
  panels+=("$title, p = 4, m = 8: the plan on paper, at the measured mean costs=$work/$schedule.json"
    "$title as run (step 2)=$work/$schedule")
done
scripts/tessera-trace timeline "${panels[@]}" -o "$output"
