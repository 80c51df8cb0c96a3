#!/usr/bin/env bash
# Allreduce between processes of one host, in the same run: Tessera's group
# with its default shared-memory collectives (collectives/shm/), Tessera's group on
# Gloo alone (TESSERA_SHM_COLLECTIVES=0), and PyTorch's Gloo group.
#   bench/compare_allreduce.sh [WORLD_SIZE...]     (default: 2 4)
# Prints, per world size and size, the median time and bus bandwidth of each,
# and the bandwidth ratios shm/Gloo and shm/PyTorch (higher is better).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:allreduce_bench 2>/dev/null
worlds=("$@")
[[ ${#worlds[@]} -gt 0 ]] || worlds=(2 4)
for world in "${worlds[@]}"; do
  shm=$(bazel-bin/bench/allreduce_bench "$world")
  gloo=$(TESSERA_SHM_COLLECTIVES=0 bazel-bin/bench/allreduce_bench "$world")
  theirs=$(ALLREDUCE_WORLD=$world /usr/bin/python3 bench/torch_allreduce_bench.py "$(mktemp)" \
    2>/dev/null | tail -n 1)
  /usr/bin/python3 - "$world" "$shm" "$gloo" "$theirs" <<'PY'
import json, sys
world = sys.argv[1]
shm, gloo, torch = (json.loads(a) for a in sys.argv[2:])
print(f"# {world} ranks: median us (bus GB/s)")
print(f"{'bytes':>10}{'tessera shm':>22}{'tessera gloo':>22}{'pytorch gloo':>22}"
      f"{'shm/gloo':>10}{'shm/pytorch':>12}")
cell = lambda v: f"{v[0]:.1f} ({v[1]:.2f})"
for size in shm:
    s, g, t = shm[size], gloo[size], torch[size]
    print(f"{int(size):>10}{cell(s):>22}{cell(g):>22}{cell(t):>22}"
          f"{s[1] / g[1]:>10.2f}{s[1] / t[1]:>12.2f}")
PY
done
