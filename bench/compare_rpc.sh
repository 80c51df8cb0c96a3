#!/usr/bin/env bash
# Runs the RPC benchmark in one go, REPEAT times (default 3) round-robin so
# the shared machine's drift hits every side alike, and prints per-metric
# medians and ratios:
#   - Tessera over TensorPipe vs PyTorch 1.13 (ours / PyTorch);
#   - Tessera over gRPC vs a bare gRPC C++ echo (//bench:grpc_floor, the
#     floor: ours / bare), and the bare TensorPipe floor;
#   - the path between hosts, forced on one host (rpc_bench --same-host=tcp:
#     TCP and the basic channel) vs a raw TCP ping-pong (//bench:socket_floor)
#     and vs the gRPC backend; the default same-host path vs a raw Unix-socket
#     ping-pong (socket_floor --unix);
#   - a 64 MiB tensor in shared memory, whose handle travels instead of its
#     bytes (Note [Tensors in shared memory]), vs the same echoes of an
#     ordinary tensor.
# For latency lower is better; for calls/s and GB/s higher is better.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //bench:rpc_bench //bench:tensorpipe_floor //bench:grpc_floor //bench:socket_floor \
    2>/dev/null
runs=$(mktemp)
for _ in $(seq "${REPEAT:-3}"); do
  echo "tp_floor $(bazel-bin/bench/tensorpipe_floor)" >>"$runs"
  echo "tensorpipe $(bazel-bin/bench/rpc_bench)" >>"$runs"
  echo "grpc_floor $(bazel-bin/bench/grpc_floor)" >>"$runs"
  echo "grpc $(bazel-bin/bench/rpc_bench --grpc)" >>"$runs"
  echo "pytorch $(/usr/bin/python3 bench/torch_rpc_bench.py "$(mktemp)" 2>/dev/null | tail -n 1)" >>"$runs"
  echo "tensorpipe_tcp $(bazel-bin/bench/rpc_bench --same-host=tcp)" >>"$runs"
  echo "tcp_floor $(bazel-bin/bench/socket_floor)" >>"$runs"
  echo "unix_floor $(bazel-bin/bench/socket_floor --unix)" >>"$runs"
done
/usr/bin/python3 - "$runs" <<'PY'
import collections, json, statistics, sys
samples = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    side, blob = line.split(" ", 1)
    for key, value in json.loads(blob).items():
        samples[side][key.removeprefix("floor_")].append(value)
med = {side: {k: statistics.median(v) for k, v in keys.items()} for side, keys in samples.items()}
runs = len(samples["grpc"]["rtt_p50_us"])
print(f"medians of {runs} runs; bare TensorPipe floor:", json.dumps(med["tp_floor"]))
def table(title, a, b, names):
    print(f"\n{title}\n{'metric':<14}{names[0]:>12}{names[1]:>12}{'ratio':>10}")
    for key in med[a]:
        if key not in med[b]:
            continue  # a floor measures fewer things
        x, y = med[a][key], med[b][key]
        r = x / y if y else float("nan")
        print(f"{key:<14}{x:>12.1f}{y:>12.1f}{r:>10.2f}")
table("TensorPipe backend vs PyTorch (ours / PyTorch)", "tensorpipe", "pytorch",
      ("tessera", "pytorch"))
table("gRPC backend vs bare gRPC echo (ours / bare)", "grpc", "grpc_floor",
      ("tessera", "bare grpc"))
table("TensorPipe backend forced onto TCP vs raw TCP (ours / raw)", "tensorpipe_tcp", "tcp_floor",
      ("tessera", "raw tcp"))
table("TensorPipe backend forced onto TCP vs the gRPC backend (TensorPipe / gRPC)",
      "tensorpipe_tcp", "grpc", ("tp tcp", "grpc"))
table("TensorPipe backend, same host (default) vs raw Unix socket (ours / raw)", "tensorpipe",
      "unix_floor", ("tessera", "raw unix"))
shared = med["tensorpipe"]["gbps_64mb_shared"]
print("\n64 MiB echo of a tensor in shared memory (a handle travels; the callee maps it):\n"
      f"  {shared:.1f} GB/s; {shared / med['tensorpipe']['gbps_64mb']:.1f}x an ordinary tensor's "
      f"({med['tensorpipe']['gbps_64mb']:.1f}), {shared / med['pytorch']['gbps_64mb']:.1f}x "
      f"PyTorch's ({med['pytorch']['gbps_64mb']:.1f}), {shared / med['unix_floor']['gbps_64mb']:.1f}x "
      f"a raw Unix-socket echo's ({med['unix_floor']['gbps_64mb']:.1f}), "
      f"{shared / med['tp_floor']['gbps_64mb']:.1f}x bare TensorPipe's ({med['tp_floor']['gbps_64mb']:.1f})")
PY
