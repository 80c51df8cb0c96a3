#!/usr/bin/env bash
# Runs a libFuzzer binary for a fixed number of inputs from its seeds; new
# inputs go to a scratch directory. Fails on any crash, leak or oversized
# allocation. Usage:
#   run_fuzzer.sh FUZZER RUNS [SEED_DIR | WRITE_SEEDS TARGET] [libFuzzer flags...]
# e.g. longer, by hand: tests/fuzz/run_fuzzer.sh bazel-bin/tests/fuzz/gate_fuzzer 0 \
#   bazel-bin/tests/fuzz/write_seeds gate -max_total_time=600   (RUNS 0: no bound)
set -euo pipefail
fuzzer=$1
runs=$2
shift 2
scratch="${TEST_TMPDIR:-$(mktemp -d)}/corpus"
seeds="${TEST_TMPDIR:-$(mktemp -d)}/seeds"
mkdir -p "$scratch" "$seeds"
if [[ $# -ge 2 && -x "$1" && ! -d "$1" ]]; then
  "$1" "$2" "$seeds"  # seeds made by the workers' own encoders
  shift 2
elif [[ $# -ge 1 && -d "$1" ]]; then
  cp "$1"/* "$seeds"/
  shift
fi
run_flag=()
[[ $runs -gt 0 ]] && run_flag=(-runs="$runs")
exec "$fuzzer" "${run_flag[@]}" -seed=1 -max_len=4096 -rss_limit_mb=4096 \
  -malloc_limit_mb=256 -use_value_profile=1 -print_final_stats=1 "$@" "$scratch" "$seeds"
