#!/usr/bin/env bash
# Runs the distributed autograd / parameter-server benchmark for Tessera and
# PyTorch 1.13 in the same run and prints both plus the ratios (ours /
# PyTorch; for times lower is better, for updates/s higher).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:dist_autograd_bench 2>/dev/null
ours=$(bazel-bin/bench/dist_autograd_bench 2>/dev/null | tail -n 1)
theirs=$(/usr/bin/python3 bench/torch_dist_autograd_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 bench/ratio_table.py "$ours" "$theirs"
