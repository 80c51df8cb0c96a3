#!/usr/bin/env bash
# DDP step time at world size 2 vs a local step, by bucket size: Tessera and
# PyTorch 1.13 in the same run. The sides' collectives differ: Tessera's go
# through shared memory (its default; set TESSERA_SHM_COLLECTIVES=0 for
# Gloo, like for like), PyTorch's through Gloo over loopback TCP. The first
# line printed says which ran. Overhead = DDP step / local step - 1,
# the median over rounds that each pair a local step (both ranks computing,
# no communication) with a DDP step (bench/ddp_bench.cc says why).
# DDP_COMM_HOOK=fp16 or bf16: both sides send compressed buckets; powersgd:R
# both use PowerSGD at rank R.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:ddp_bench 2>/dev/null
ours=$(bazel-bin/bench/ddp_bench)
theirs=$(/usr/bin/python3 bench/torch_ddp_bench.py "$(mktemp)" 2>&1 | tail -n 1 || true)
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours = json.loads(sys.argv[1])
try:
    theirs = json.loads(sys.argv[2])
except ValueError:  # e.g. 1.13's powerSGD_hook over Gloo aborts on mismatched collectives
    theirs = {"unsupported": "the PyTorch run failed: " + sys.argv[2]}
import os
shm = os.environ.get("TESSERA_SHM_COLLECTIVES", "1") != "0"
print("tessera: " + ("shared-memory collectives (its default)" if shm else "Gloo (TESSERA_SHM_COLLECTIVES=0)")
      + "; pytorch 1.13: Gloo over loopback TCP")
print("per bucket size: median local step, median DDP step (ms), median DDP/local - 1")
print(f"{'bucket':>8}{'tessera local':>15}{'ddp':>8}{'overhead':>10}{'pytorch local':>15}{'ddp':>8}{'overhead':>10}")
for mb in (1, 5, 25, 100):
    row = f"{mb:>6}MB"
    for r in (ours, theirs):
        if "unsupported" in r:
            row += f"{'unsupported':>33}"
            continue
        row += f"{r[f'local_{mb}mb_ms']:>15.1f}{r[f'ddp_{mb}mb_ms']:>8.1f}{r[f'overhead_{mb}mb']:>10.3f}"
    print(row)
if "unsupported" in theirs:
    print("pytorch:", theirs["unsupported"])
PY
