#!/usr/bin/env bash
# The sanitizer runs CI makes after scripts/test.sh (.ci/run):
# ThreadSanitizer and AddressSanitizer over the suites where threads meet
# most — RPC faults (dead peers, cut connections, shutdown under load) and
# the RRef protocol on both backends, distributed autograd, the worker
# pool's hand-offs (its polling thread and one-at-a-time wake-ups), the
# guarded TCP transport, tensors in shared memory with the descriptor
# inbox's thread (shared_tensors_test, its 16-sender case included), and the
# sharded parameter server's clients, shards and clocks (ps_test; its unit
# test row_store_test beside it) and its replication and failover
# (ps_failover_test: op logs, leases, heartbeats, calls sent again, a
# restarted server rejoining; shard_snapshot_test: snapshots restored;
# ps_checkpoint_test: cuts held and released, a lost shard restored).
#   scripts/sanitizers.sh [--build-only] [bazel test arguments...]
# Both sanitizers always run: one that cannot be built or run fails the
# script, never skips (a green CI must mean they ran).
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
         //tests/rref:rref_test_grpc //tests/dist_autograd:dist_autograd_test
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
status=0
for config in tsan asan; do
  echo "sanitizers: $verb --config=$config: ${targets[*]}"
  # --symlink_prefix=/: no convenience symlinks (bazel-bin, bazel-<dir>...).
  # They belong to the main output base; one pointing into this one would be
  # walked by the main build's //... as a package tree.
  bazel --output_base="$output_base" "$verb" --symlink_prefix=/ --config="$config" "$@" \
    "${targets[@]}" || status=1
done
if [[ $status -ne 0 ]]; then
  echo "sanitizers: FAILED (a build or a test above)"
fi
exit "$status"
