#!/usr/bin/env bash
# Runs the RRef benchmark for Tessera and PyTorch 1.13 in the same run and
# prints both plus the ratios (ours / PyTorch; for latency lower is better).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:rref_bench 2>/dev/null
ours=$(bazel-bin/bench/rref_bench)
theirs=$(/usr/bin/python3 bench/torch_rref_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'metric':<24}{'tessera':>12}{'pytorch':>12}{'ratio':>10}")
for key in ours:
    r = ours[key] / theirs[key] if theirs[key] else float('nan')
    print(f"{key:<24}{ours[key]:>12}{theirs[key]:>12}{r:>10.2f}")
PY
