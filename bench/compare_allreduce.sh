#!/usr/bin/env bash
# Allreduce over Gloo, 2 processes: Tessera's process group and PyTorch's, in
# the same run. Prints median time and bus bandwidth per size, and the ratio
# of bandwidths (ours / PyTorch; higher is better).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:allreduce_bench 2>/dev/null
ours=$(bazel-bin/bench/allreduce_bench)
theirs=$(/usr/bin/python3 bench/torch_allreduce_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'bytes':>10}{'tessera us':>14}{'GB/s':>8}{'pytorch us':>14}{'GB/s':>8}{'bw ratio':>10}")
for size in ours:
    (ot, ob), (tt, tb) = ours[size], theirs[size]
    print(f"{int(size):>10}{ot:>14.1f}{ob:>8.3f}{tt:>14.1f}{tb:>8.3f}{ob / tb:>10.2f}")
PY
