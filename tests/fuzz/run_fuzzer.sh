#!/usr/bin/env bash
# Runs a libFuzzer binary for a fixed number of inputs from the seed corpus;
# new inputs go to a scratch directory. Fails on any crash or leak report.
set -euo pipefail
fuzzer=$1
seeds=$2
scratch="${TEST_TMPDIR:-$(mktemp -d)}/corpus"
mkdir -p "$scratch"
exec "$fuzzer" -runs=300000 -seed=1 -max_len=4096 -rss_limit_mb=4096 \
  -malloc_limit_mb=256 -use_value_profile=1 -print_final_stats=1 "$scratch" "$seeds"
