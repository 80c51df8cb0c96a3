#!/usr/bin/env bash
# On a machine of many cores (the device machines: 16), from a bundle made
# here by scripts/gpu/bundle.py that holds tessera-run and ps_recommender
# (docs/gpu.md): the recommender's training samples/s as trainers grow,
# each shard with one backup (--backups 1) against none, asynchronous, a
# core per process (taskset over the first servers + trainers cores):
#   scripts/gpu/ps_scaling.sh BUNDLE.tar.xz OUT_DIR [SERVERS [TRAINERS...]]
# Writes OUT_DIR/ps_scaling.txt (one line a run: samples/s, AUC, from
# bench/recommender_summary.awk) and OUT_DIR/ps_scaling.log (the jobs).
set -uo pipefail
bundle=$1 out=$2 servers=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
trainer_counts=("${@:-1 2 4 8}")
cd "$(dirname "$0")/../.."
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
tar -C "$root" -xJf "$bundle" || exit 1
export LD_LIBRARY_PATH=$root/lib
for round in 1 2; do
  for trainers in ${trainer_counts[*]}; do
    for backups in 0 1; do
      n=$((servers + trainers))
      echo "round $round, $servers servers, $trainers trainers, $backups backups: $(
        timeout 120 taskset -c 0-$((n - 1)) "$root/bin/tessera-run" --standalone \
          --nproc_per_node "$n" "$root/bin/ps_recommender" --servers "$servers" \
          --backups "$backups" --consistency async --log_every 1000000 2>&1 |
          tee -a "$out/ps_scaling.log" | awk -f bench/recommender_summary.awk)"
    done
  done
done | tee "$out/ps_scaling.txt"
