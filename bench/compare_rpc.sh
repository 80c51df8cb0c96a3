#!/usr/bin/env bash
# Runs the RPC benchmark for Tessera and for PyTorch 1.13 in the same run and
# prints both plus the ratios (ours / PyTorch; for latency lower is better).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:rpc_bench //bench:tensorpipe_floor 2>/dev/null
floor=$(bazel-bin/bench/tensorpipe_floor)
ours=$(bazel-bin/bench/rpc_bench)
theirs=$(/usr/bin/python3 bench/torch_rpc_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 - "$ours" "$theirs" "$floor" <<'PY'
import json, sys
ours, theirs, floor = (json.loads(a) for a in sys.argv[1:4])
print("bare TensorPipe floor (callbacks only, reused buffers):", floor)
print(f"{'metric':<14}{'tessera':>12}{'pytorch':>12}{'ratio':>10}")
for key in ours:
    r = ours[key] / theirs[key] if theirs[key] else float('nan')
    print(f"{key:<14}{ours[key]:>12}{theirs[key]:>12}{r:>10.2f}")
PY
