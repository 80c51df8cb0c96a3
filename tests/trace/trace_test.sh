#!/usr/bin/env bash
# Runs trace_test.py with Debian's python3 (which has matplotlib for the
# timeline), from the runfiles tree.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/trace_test.py" "$@"
