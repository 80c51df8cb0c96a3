#!/usr/bin/env bash
# Runs the RRef benchmark for Tessera and PyTorch 1.13 in the same run and
# prints both plus the ratios (ours / PyTorch; for latency lower is better).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:rref_bench 2>/dev/null
ours=$(bazel-bin/bench/rref_bench)
theirs=$(/usr/bin/python3 bench/torch_rref_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 bench/ratio_table.py "$ours" "$theirs"
