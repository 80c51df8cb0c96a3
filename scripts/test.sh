#!/usr/bin/env bash
# Builds Tessera and runs every test: the README's test command.
# Extra arguments go to `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh || exit 1
log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# One plain closing line: N passed, N failed (counting test targets).
passed=$(grep -cE '^//.* PASSED in' "$log")
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS)' "$log")
rm -f "$log"
echo "${passed} passed, ${failed} failed"
exit "$status"
