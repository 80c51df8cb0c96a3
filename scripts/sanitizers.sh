#!/usr/bin/env bash
# The sanitizer runs CI makes after scripts/test.sh (.ci/run):
# ThreadSanitizer and AddressSanitizer over the suites where threads meet
# most — RPC faults (dead peers, cut connections, shutdown under load) on
# both backends, the RRef protocol (over TensorPipe only: the same code
# runs above either agent, and rpc_faults_test_grpc covers the gRPC agent's
# own threads; rref_test_grpc cost 224 s of the sanitizer runs),
# distributed autograd, the worker pool's hand-offs (its polling thread and one-at-a-time wake-ups), the
# guarded TCP transport, tensors in shared memory with the descriptor
# inbox's thread (shared_tensors_test, its 16-sender case included), and the
# sharded parameter server's clients, shards and clocks (ps_test; its unit
# test row_store_test beside it) and its replication and failover
# (ps_failover_test: op logs, leases, heartbeats, calls sent again, a
# restarted server rejoining; shard_snapshot_test: snapshots restored;
# ps_checkpoint_test: cuts held and released, a lost shard restored).
#   scripts/sanitizers.sh [--build-only] [bazel test arguments...]
# Both sanitizers always run: one that cannot be built or run fails the
# script, never skips (a green CI must mean they ran). A report from any
# process of a test fails it too, the test's own result aside, and a canary
# proves each run would see one (check_reports, below).
#
# Why a subset: each sanitizer rebuilds everything its tests link (a TSan
# build links statically), so the whole suite under both would take hours
# on CI's 2 cores. These are the suites the one data race TSan has found
# lived in (issue 36), and every concurrency-heavy component since. The
# full runs stay one command away: scripts/test.sh --config=tsan (or asan).
#
# The builds use an output base of their own (a Bazel server beside the
# main one), and each sanitizer its own output directory (--platform_suffix
# in .bazelrc), so CI can build both at idle CPU priority while the main
# suite's tests run — on the CPU those tests leave idle (--build-only,
# under scripts/idle_priority.sh) — and then only run them.
set -uo pipefail
cd "$(dirname "$0")/.."
build_only=false
if [[ ${1:-} == --build-only ]]; then
  build_only=true
  shift
fi
output_base="${XDG_CACHE_HOME:-$HOME/.cache}/tessera-sanitizers/$(pwd | md5sum | cut -c1-16)"
targets=(//tests/rpc:rpc_faults_test //tests/rpc:rpc_faults_test_grpc //tests/rref:rref_test
         //tests/dist_autograd:dist_autograd_test
         //tests/common:thread_pool_test //tests/rpc:guarded_tcp_test //tests/rpc:shared_tensors_test
         //tests/ps:ps_test //tests/ps:row_store_test //tests/ps:ps_failover_test
         //tests/ps:shard_snapshot_test //tests/ps:ps_checkpoint_test)
verb=test
if $build_only; then
  verb=build
  # A server started earlier would build at its own priority, not at that
  # of this script's caller (.ci/run: idle, scripts/idle_priority.sh).
  bazel --output_base="$output_base" shutdown 2>/dev/null
fi
canary=//tests/sanitizers:sanitizer_canary_test
# Every process a test starts — workers, servers, tessera-run — writes its
# reports to a file of its own here (log_path, inherited through the
# environment), not only to a stderr that nobody reads once the test has
# passed: a worker killed at a test's end, or a server whose death the
# failover it tests absorbed, has no exit code anyone checks. Any report
# fails the run, and the canary's must be there (sanitizer_canary_test.cc).
# The folder's name is new each run, and with it the tests' environment:
# no result comes from Bazel's cache, so every report is written anew.
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
# Prints the reports of $1 (tsan or asan) but the canary's; fails if the
# canary's is missing or another is there.
check_reports() {
  local config=$1 found=0 canary_seen=false file
  for file in "$reports/$config".*; do
    [[ -f $file ]] || continue
    grep -qE '(WARNING|ERROR): (ThreadSanitizer|AddressSanitizer|LeakSanitizer)' "$file" || continue
    if [[ $file == */$config.sanitizer_canary_test.* ]]; then
      canary_seen=true
      continue
    fi
    found=$((found + 1))
    echo "sanitizers: a report of $config in $(basename "$file"):"
    head -80 "$file"
  done
  if ! $canary_seen; then
    echo "sanitizers: the canary's $config report was not found: the sanitizer did not run, or" \
      "the reports of child processes are not collected"
    return 1
  fi
  if [[ $found -gt 0 ]]; then
    echo "sanitizers: $found process(es) reported under $config (above), though their tests passed"
    return 1
  fi
  echo "sanitizers: $config: no process reported; the canary's report was seen"
}
status=0
for config in tsan asan; do
  run=("$canary" "${targets[@]}")
  log_options=()
  if [[ $verb == test ]]; then
    option_name=$(tr a-z A-Z <<<"$config")_OPTIONS  # TSAN_OPTIONS, ASAN_OPTIONS
    log_options=(--test_env="$option_name=log_path=$reports/$config:log_exe_name=1")
  fi
  echo "sanitizers: $verb --config=$config: ${run[*]}"
  # --symlink_prefix=/: no convenience symlinks (bazel-bin, bazel-<dir>...).
  # They belong to the main output base; one pointing into this one would be
  # walked by the main build's //... as a package tree.
  # --local_startup_timeout_secs: at idle CPU priority beside a busy main
  # build (.ci/run) this server may get no CPU to start for minutes, past
  # the client's default 120 s wait; it is not on the critical path.
  bazel --output_base="$output_base" --local_startup_timeout_secs=1800 \
    "$verb" --symlink_prefix=/ --config="$config" \
    "${log_options[@]}" "$@" "${run[@]}" || status=1
  if [[ $verb == test ]]; then
    check_reports "$config" || status=1
  fi
done
if [[ $status -ne 0 ]]; then
  echo "sanitizers: FAILED (a build or a test above)"
fi
exit "$status"
