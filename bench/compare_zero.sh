#!/usr/bin/env bash
# ZeroRedundancyOptimizer at world size 2: step time against DDP + Adam and
# Adam's state per rank, Tessera and PyTorch 1.13 in the same run
# (bench/zero_bench.cc says how a step is measured). The sides' collectives
# differ: Tessera's go through shared memory (its default; set
# TESSERA_SHM_COLLECTIVES=0 for Gloo, like for like), PyTorch's through Gloo
# over loopback TCP. The first line printed says which ran.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:zero_bench 2>/dev/null
ours=$(bazel-bin/bench/zero_bench)
theirs=$(/usr/bin/python3 bench/torch_zero_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
import os
shm = os.environ.get("TESSERA_SHM_COLLECTIVES", "1") != "0"
print("tessera: " + ("shared-memory collectives (its default)" if shm else "Gloo (TESSERA_SHM_COLLECTIVES=0)")
      + "; pytorch 1.13: Gloo over loopback TCP")
print(f"{'':10}{'DDP+Adam ms':>13}{'DDP+ZeRO ms':>13}{'ZeRO/Adam':>11}{'Adam state MiB/rank':>21}{'ZeRO state MiB/rank':>21}")
for name, r in (("tessera", ours), ("pytorch", theirs)):
    print(f"{name:10}{r['adam_ms']:>13.1f}{r['zero_ms']:>13.1f}{r['ratio']:>11.2f}"
          f"{r['adam_state_bytes'] / 2**20:>21.1f}{r['zero_state_bytes'] / 2**20:>21.1f}")
print(f"ZeRO step, tessera / pytorch: {ours['zero_ms'] / theirs['zero_ms']:.2f}")
print(f"tessera overlap_with_ddp: {ours['overlap_ms']:.1f} ms ({ours['overlap_ratio']:.2f} x DDP+Adam)")
PY
