#!/usr/bin/env bash
# The staleness study of issue 52 (the OSDI 2014 parameter server's
# Figure 13 has this shape): the recommender (examples/ps_recommender) on
# 2 servers + 2 trainers under synchronous tables, bounded staleness
# τ ∈ {0, 1, 2, 4, 8, 16} and asynchronous ones, with two kinds of slowness
# (a sleep, so that a slowed trainer leaves its core to the others):
#   slow:   trainer1 computes 2x slower all along (--slow_trainer 1
#           --slowdown 2), a slower machine;
#   stalls: each trainer stalls at 10% of its steps for 10x the step's
#           compute (--stall_probability 0.1 --stall_length 10), on average
#           as slow, but now and then: a shared machine.
# Per run: each trainer's share of its time spent
# pulling (waiting for the servers and, as the consistency requires, for the
# slow trainer), the time until a trainer's smoothed training loss first
# falls below the target, the job's training time (the slower trainer's) and
# the final test AUC. RUNS rounds; quote the range.
#   bench/ps_staleness.sh [runs=2] [target loss=0.53]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
TARGET=${2:-0.53}
bazel build //examples/ps_recommender //launcher:tessera-run >/dev/null 2>&1
export TESSERA_JOB_SECRET="bench-$$-$RANDOM"
printf '%-7s %-12s %-4s %10s %10s %14s %10s %8s\n' slowness consistency run "pull% t0" "pull% t1" "to target (s)" "train (s)" AUC
for ((run = 1; run <= RUNS; run++)); do
  for slowness in slow stalls; do
  case $slowness in
    slow) slow=(--slow_trainer 1 --slowdown 2) ;;
    stalls) slow=(--stall_probability 0.1 --stall_length 10) ;;
  esac
  for mode in sync 0 1 2 4 8 16 async; do
    case $mode in
      sync | async) flags=(--consistency "$mode") label=$mode ;;
      *) flags=(--consistency bounded --staleness "$mode") label="bounded $mode" ;;
    esac
    out=$(bazel-bin/launcher/tessera-run --standalone --nproc_per_node 4 \
      bazel-bin/examples/ps_recommender/ps_recommender --servers 2 "${flags[@]}" \
      "${slow[@]}" --target_loss "$TARGET" --log_every 100000 2>&1)
    pulling() { sed -n "s/.*\[trainer$1\] trained .*, \([0-9.]*\)% of it pulling/\1/p" <<<"$out"; }
    target=$(sed -n 's/.*smoothed loss below .*, \([0-9.]*\) s$/\1/p' <<<"$out" | sort -g | head -1)
    train=$(sed -n 's/.*trained [0-9]* samples in \([0-9.]*\) s.*/\1/p' <<<"$out" | sort -g | tail -1)
    auc=$(sed -n 's/.*\[trainer0\] test AUC \([0-9.]*\).*/\1/p' <<<"$out")
    printf '%-7s %-12s %-4s %10s %10s %14s %10s %8s\n' "$slowness" "$label" "$run" "$(pulling 0)" "$(pulling 1)" \
      "${target:-never}" "$train" "$auc"
  done
  done
done
