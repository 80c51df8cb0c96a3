#!/usr/bin/env bash
# Builds Tessera and runs every test: the README's test command.
# Extra arguments go to `bazel test` (e.g. --config=asan).
#
# The NCCL backend's targets (//collectives/nccl, //tests/collectives:nccl_process_group_test)
# are tagged manual, left out of //...: they need CUDA and NCCL to build. They
# are built and run here too when CUDA is installed in /usr/local/cuda (see
# WORKSPACE); their GPU tests skip without a visible GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh || exit 1
scripts/check_layering.sh --self-test && scripts/check_layering.sh || exit 1
scripts/check_errors.sh || exit 1
scripts/check_sizes.sh --self-test && scripts/check_sizes.sh || exit 1
scripts/check_references.py --self-test && scripts/check_references.py || exit 1
log=$(mktemp)
run_marker=$(mktemp)  # its time: test logs newer than it are this run's
bazel test //... "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [[ -f /usr/local/cuda/include/nccl.h ]]; then
  echo "CUDA and NCCL found in /usr/local/cuda: testing the NCCL backend too"
  bazel test //collectives/nccl //tests/collectives:nccl_process_group_test //bench:nccl_allreduce_bench "$@" 2>&1 | tee -a "$log"
  nccl_status=${PIPESTATUS[0]}
  [[ $status -eq 0 ]] && status=$nccl_status
else
  echo "no CUDA and NCCL in /usr/local/cuda: the NCCL backend is not built"
fi
# The public ABI against the one recorded for the soname (see Note [The
# public ABI], tessera/public_abi.cc), after a planted break that must be
# caught. The default build's library, whatever "$@" asked of the tests.
echo "the public ABI: scripts/check_abi.sh"
{ scripts/check_abi.sh --self-test && scripts/check_abi.sh; } 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
# Clang's thread-safety analysis of the lock annotations (gcc ignores
# them); it reads the generated headers the build above made. It runs beside
# the out-of-tree test below, whose Bazel server start-up, installs and job
# runs leave cores idle (together 138 s here, one after the other 280 s).
thread_safety_log=$(mktemp)
TESSERA_BAZEL_BIN=$(bazel info bazel-bin "$@" 2>/dev/null) \
  bash -c 'scripts/check_thread_safety.sh --self-test && scripts/check_thread_safety.sh' \
  >"$thread_safety_log" 2>&1 &
thread_safety=$!
# Tessera from a project of one's own: install, CMake, pkg-config, Bazel.
# After the Bazel tests: it builds in this workspace (install.sh).
echo "Tessera in a project of its own: tests/out_of_tree/out_of_tree_test.sh"
started=$SECONDS
if tests/out_of_tree/out_of_tree_test.sh 2>&1 | tee -a "$log"; then  # pipefail: the test's status
  result=PASSED
else
  result=FAILED
  status=1
fi
echo "//tests/out_of_tree:out_of_tree_test $result in $((SECONDS - started))s" | tee -a "$log"
wait "$thread_safety" || status=1
cat "$thread_safety_log"
rm -f "$thread_safety_log"
# The closing lines: the ten slowest targets (the budget stays visible:
# CI's run must fit 45 minutes), every test that skipped with its reason
# (none may skip silently: under CI the multi-host tests fail instead, and
# only the NCCL tests' GPU cases skip, on a machine without a GPU), then
# N passed, N failed (counting test targets).
echo "the ten slowest test targets (s):"
sed -nE 's/^(\/\/[^ ]+) +(\(cached\) )?(PASSED|FAILED|FLAKY) in ([0-9.]+)s$/\4 \1/p' "$log" |
  sort -rn | head -10 | awk '{ printf "  %7.1f  %s\n", $1, $2 }'
testlogs=$(bazel info bazel-testlogs "$@" 2>/dev/null)
skipped=$(find "$testlogs" -name test.log -newer "$run_marker" -print0 2>/dev/null |
  xargs -0 -r awk '/: Skipped$/ { getline why; next }
                   /^\[  SKIPPED \] [^ ]+ \(/ { print "  " $4 ": " why }' | sort -u)
if [[ -n $skipped ]]; then
  echo "skipped tests, with their reasons:"
  echo "$skipped"
else
  echo "no test skipped"
fi
passed=$(grep -cE '^//.* PASSED in' "$log")
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS)' "$log")
rm -f "$log" "$run_marker"
echo "${passed} passed, ${failed} failed"
exit "$status"
