#!/usr/bin/env bash
# The benchmark programs still start and report (not how fast: timings never
# decide a test here). Each gets its processes, its store and its job secret
# as bench/compare_*.sh run them; a benchmark that cannot meet its ranks
# fails here instead of in the next person's measurement.
set -euo pipefail
# Every benchmark program given: --help prints its usage on standard output
# and exits 0 (GNU's convention, as for every program of Tessera's).
for program in "$@"; do
  if ! help=$("$program" --help 2>/dev/null) || [[ $help != usage:* ]]; then
    echo "FAIL: $program --help: non-zero status, or no usage on standard output"; exit 1
  fi
done
echo "ok: --help of $# benchmark programs"
check() {  # check NAME KEY COMMAND...: COMMAND's last line is JSON holding KEY
  local name=$1 key=$2
  shift 2
  local out
  if ! out=$("$@" 2>&1); then
    echo "FAIL: $name exited non-zero:"; echo "$out"; exit 1
  fi
  if ! tail -n 1 <<<"$out" | grep -q "\"$key\""; then
    echo "FAIL: $name did not report $key:"; echo "$out"; exit 1
  fi
  echo "ok: $name"
}
check rpc_bench rtt_p50_us "$1"
check rref_bench remote_method_p50_us "$2"
check dist_autograd_bench overhead_per_edge_us "$3"
ALLREDUCE_SIZES=4,65536 ALLREDUCE_ITERATIONS=3 check allreduce_bench 65536 "$4"
check sync_batch_norm_bench ratio_32x256x4x4 "$5"
check checkpoint_bench save_s "${12}" "$TEST_TMPDIR" 4 1
# On paper, GPipe at 4 workers and 8 micro-batches idles 3/11 with equal costs.
if [[ $("${13}" gpipe 4 1 8 1 1 1) != "idle 0.273 "* ]]; then
  echo "FAIL: plan_on_paper gpipe 4 1 8: $("${13}" gpipe 4 1 8 1 1 1)"; exit 1
fi
echo "ok: plan_on_paper"
