#!/usr/bin/env bash
# Builds Tessera and runs every test: the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel test //... "$@"
