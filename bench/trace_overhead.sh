#!/usr/bin/env bash
# Tracing's cost on the RPC benchmark (see Note [Tracing], common/trace.h):
# bench/rpc_bench with tracing off and with TESSERA_TRACE set, REPEAT times
# (default 5) round-robin, then per-metric medians and on / off ratios, and
# bench/trace_cost's nanoseconds per span. With OLD=path/to/rpc_bench (a
# build from before tracing existed) it runs too, to show that off costs
# nothing: old / off.
#   REPEAT=6 OLD=/work/old/bazel-bin/bench/rpc_bench bench/trace_overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:rpc_bench //bench:trace_cost 2>/dev/null
runs=$(mktemp)
trace_dir=$(mktemp -d)
for _ in $(seq "${REPEAT:-5}"); do
  [[ -n ${OLD:-} ]] && echo "old $("$OLD" | tail -n 1)" >>"$runs"
  echo "off $(bazel-bin/bench/rpc_bench | tail -n 1)" >>"$runs"
  rm -rf "$trace_dir"/*
  echo "on $(TESSERA_TRACE="$trace_dir" bazel-bin/bench/rpc_bench | tail -n 1)" >>"$runs"
done
rm -rf "$trace_dir"
bazel-bin/bench/trace_cost
/usr/bin/python3 - "$runs" <<'PY'
import collections, json, statistics, sys
samples = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    side, _, report = line.partition(" ")
    for key, value in json.loads(report).items():
        samples[side][key].append(value)
sides = [s for s in ("old", "off", "on") if s in samples]
print(f"{'metric':<14}" + "".join(f"{s:>10}" for s in sides) + f"{'on/off':>8}"
      + (f"{'old/off':>9}" if "old" in samples else ""))
for key in samples["off"]:
    median = {s: statistics.median(samples[s][key]) for s in sides}
    row = f"{key:<14}" + "".join(f"{median[s]:>10.1f}" for s in sides)
    row += f"{median['on'] / median['off']:>8.2f}"
    if "old" in median:
        row += f"{median['old'] / median['off']:>9.2f}"
    print(row)
PY
