#!/usr/bin/env bash
# The sanitizer runs CI makes after scripts/test.sh (.ci/run):
# ThreadSanitizer and AddressSanitizer over the suites where threads meet
# most — RPC faults (dead peers, cut connections, shutdown under load) and
# the RRef protocol on both backends, distributed autograd, and the worker
# pool's hand-offs (its polling thread and one-at-a-time wake-ups).
#   scripts/sanitizers.sh [--budget SECONDS] [bazel test arguments...]
# Why a subset: CI has 90 minutes and scripts/test.sh takes ~70 of them on a
# fresh machine; each sanitizer rebuilds everything its tests link (a TSan
# build links statically), so the whole suite under both would take hours
# here. These are the suites the one data race TSan has found lived in
# (issue 36). The full runs stay one command away: scripts/test.sh
# --config=tsan (or asan).
#
# --budget: each sanitizer runs only if at least that many seconds are left
# in CI's run (CI_DEADLINE, seconds since the epoch, set by .ci/run), and
# says it skipped otherwise, instead of taking CI past its limit. From a
# clean output base here each took ~11 minutes, mostly building.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=0
if [[ ${1:-} == --budget ]]; then
  budget=$2
  shift 2
fi
targets=(//tests/rpc:rpc_faults_test //tests/rpc:rpc_faults_test_grpc //tests/rref:rref_test
         //tests/rref:rref_test_grpc //tests/dist_autograd:dist_autograd_test
         //tests/common:thread_pool_test //tests/rpc:guarded_tcp_test //tests/rpc:shared_tensors_test)
status=0
for config in tsan asan; do
  if [[ -n ${CI_DEADLINE:-} ]] && (( CI_DEADLINE - $(date +%s) < budget )); then
    echo "sanitizers: --config=$config SKIPPED: fewer than ${budget}s left before CI's deadline"
    continue
  fi
  echo "sanitizers: --config=$config over ${targets[*]}"
  bazel test --config="$config" "$@" "${targets[@]}" || status=1
done
exit "$status"
