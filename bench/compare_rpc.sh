#!/usr/bin/env bash
# Runs the RPC benchmark in one go, REPEAT times (default 3) round-robin so
# the shared machine's drift hits every side alike, and prints per metric
# the median and the range (min-max) of the runs, with ratios of medians:
#   - Tessera over TensorPipe vs PyTorch 1.13's RPC, calling a pickled
#     Python function and a TorchScript one (PyTorch's fastest path);
#   - Tessera over gRPC vs a bare gRPC C++ echo (//bench:grpc_floor);
#   - the path between hosts, forced on one host (rpc_bench --same-host=tcp:
#     TCP and the basic channel) vs a raw TCP ping-pong (//bench:socket_floor)
#     and vs the gRPC backend; the default same-host path vs a raw Unix-socket
#     ping-pong (socket_floor --unix) and bare TensorPipe
#     (//bench:tensorpipe_floor);
#   - a 64 MiB tensor in shared memory, whose handle travels instead of its
#     bytes (see Note [Tensors in shared memory]): reported alone, since nothing
#     that copies compares with it.
# The bare programs are references, not floors: they block in recv (or wait
# on a promise), where Tessera's transport polls before it sleeps, and
# Tessera's round trip beats them (docs/benchmarks.md). The floors are the
# same raw ping-pongs with both ends polling (socket_floor --spin): no
# wake-up at all. Binaries keep their historical "_floor" names.
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
  echo "pytorch_script $(TORCH_RPC_BENCH_TORCHSCRIPT=1 /usr/bin/python3 bench/torch_rpc_bench.py \
    "$(mktemp)" 2>/dev/null | tail -n 1)" >>"$runs"
  echo "tensorpipe_tcp $(bazel-bin/bench/rpc_bench --same-host=tcp)" >>"$runs"
  echo "tcp_floor $(bazel-bin/bench/socket_floor)" >>"$runs"
  echo "unix_floor $(bazel-bin/bench/socket_floor --unix)" >>"$runs"
  echo "unix_spin $(bazel-bin/bench/socket_floor --unix --spin)" >>"$runs"
  echo "tcp_spin $(bazel-bin/bench/socket_floor --spin)" >>"$runs"
done
/usr/bin/python3 - "$runs" <<'PY'
import collections, json, statistics, sys
samples = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    side, blob = line.split(" ", 1)
    for key, value in json.loads(blob).items():
        samples[side][key.removeprefix("floor_")].append(value)
med = {side: {k: statistics.median(v) for k, v in keys.items()} for side, keys in samples.items()}
span = {side: {k: (min(v), max(v)) for k, v in keys.items()} for side, keys in samples.items()}
runs = len(samples["grpc"]["rtt_p50_us"])
print(f"{runs} runs: each figure is the median [min-max] of the runs; ratios of medians")
def num(v):
    return f"{v:.1f}" if v < 1000 else f"{v:.0f}"
def cell(side, key):
    lo, hi = span[side][key]
    return f"{num(med[side][key])} [{num(lo)}-{num(hi)}]"
def table(title, a, b, names):
    print(f"\n{title}\n{'metric':<18}{names[0]:>26}{names[1]:>26}{'ratio':>8}")
    for key in med[a]:
        if key not in med[b]:
            continue  # a reference measures fewer things
        x, y = med[a][key], med[b][key]
        r = x / y if y else float("nan")
        print(f"{key:<18}{cell(a, key):>26}{cell(b, key):>26}{r:>8.2f}")
table("TensorPipe backend vs PyTorch, pickled Python function (ours / PyTorch)", "tensorpipe",
      "pytorch", ("tessera", "pytorch python"))
table("TensorPipe backend vs PyTorch, TorchScript function (ours / PyTorch)", "tensorpipe",
      "pytorch_script", ("tessera", "pytorch torchscript"))
table("gRPC backend vs bare gRPC C++ echo (ours / bare)", "grpc", "grpc_floor",
      ("tessera", "bare grpc"))
table("TensorPipe backend forced onto TCP vs raw TCP, blocking recv (ours / raw)",
      "tensorpipe_tcp", "tcp_floor", ("tessera", "raw tcp"))
table("TensorPipe backend forced onto TCP vs the gRPC backend (TensorPipe / gRPC)",
      "tensorpipe_tcp", "grpc", ("tp tcp", "grpc"))
table("TensorPipe backend, same host (default) vs raw Unix socket, blocking recv (ours / raw)",
      "tensorpipe", "unix_floor", ("tessera", "raw unix"))
table("FLOOR: TensorPipe backend, same host (default) vs raw Unix socket, both ends polling",
      "tensorpipe", "unix_spin", ("tessera", "floor (unix spin)"))
table("FLOOR: TensorPipe backend forced onto TCP vs raw TCP, both ends polling",
      "tensorpipe_tcp", "tcp_spin", ("tessera", "floor (tcp spin)"))
table("TensorPipe backend, same host (default) vs bare TensorPipe (ours / bare)", "tensorpipe",
      "tp_floor", ("tessera", "bare tensorpipe"))
print("\n64 MiB echo of a tensor in shared memory (a handle travels, the callee maps it; no byte\n"
      f"is copied, so no copying path compares): {cell('tensorpipe', 'gbps_64mb_shared')} GB/s")
PY
