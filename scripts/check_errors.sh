#!/usr/bin/env bash
# The error rule (README "Errors"): the library reports a failure as a
# tessera::StatusError carrying its status code, so one
# `catch (const tessera::StatusError&)` sees them all. Fails, printing each
# place, if library code throws a standard exception instead.
#   scripts/check_errors.sh
# Allowed: std::bad_alloc (an allocation that failed).
set -uo pipefail
cd "$(dirname "$0")/.."
packages=(auth checkpoint common data ddp dist_autograd dist_optim launcher pipeline proto rpc
          rref store tessera)
found=$(grep -rnE 'throw std::[a-z_]+' --include='*.cc' --include='*.h' "${packages[@]}" 2>/dev/null |
  grep -v 'throw std::bad_alloc')
if [[ -n $found ]]; then
  echo "errors: library code throws a standard exception; throw tessera::StatusError"
  echo "(common/status.h) with the status code instead:"
  echo "$found"
  exit 1
fi
echo "errors: every throw in the library is a StatusError"
