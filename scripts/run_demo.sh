#!/usr/bin/env bash
# Runs the main job: 3 local workers exchanging tensors over Tessera RPC.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel build //examples/rpc_demo:rpc_demo
exec bazel-bin/examples/rpc_demo/rpc_demo "$@"
