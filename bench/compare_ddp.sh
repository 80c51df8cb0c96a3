#!/usr/bin/env bash
# DDP step time at world size 2 vs a local step, by bucket size: Tessera and
# PyTorch 1.13 (Gloo) in the same run. Overhead = DDP step / local step - 1.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:ddp_bench 2>/dev/null
ours=$(bazel-bin/bench/ddp_bench)
theirs=$(/usr/bin/python3 bench/torch_ddp_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"local step: tessera {ours['local_ms']:.1f} ms, pytorch {theirs['local_ms']:.1f} ms")
print(f"{'bucket':>8}{'tessera ms':>12}{'overhead':>10}{'pytorch ms':>12}{'overhead':>10}")
for mb in (1, 5, 25, 100):
    k = f"ddp_{mb}mb_ms"
    o, t = ours[k], theirs[k]
    print(f"{mb:>6}MB{o:>12.1f}{o / ours['local_ms'] - 1:>10.2f}{t:>12.1f}{t / theirs['local_ms'] - 1:>10.2f}")
PY
