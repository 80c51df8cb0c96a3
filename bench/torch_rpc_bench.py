"""The workloads of bench/rpc_bench.cc with PyTorch's torch.distributed.rpc
(TensorPipe backend), two processes on loopback. Prints one JSON object with
the same keys. Run with Debian's /usr/bin/python3 (python3-torch 1.13).

TORCH_RPC_BENCH_TORCHSCRIPT=1 calls a TorchScript function instead of a
Python one: PyTorch's fastest RPC path (the callee runs it without the GIL
and nothing is pickled), the like-for-like match for Tessera's compiled
C++ functions."""
import json
import os
import time

import torch
import torch.distributed.rpc as rpc
from torch_two_processes import init_rpc, run_two_processes


def echo(t):
    return t


@torch.jit.script
def echo_script(t: torch.Tensor) -> torch.Tensor:
    return t


ECHO = echo_script if os.environ.get("TORCH_RPC_BENCH_TORCHSCRIPT") == "1" else echo


def bandwidth(nbytes, iterations):
    t = torch.ones(nbytes // 4)
    rpc.rpc_sync("worker1", ECHO, args=(t,))
    start = time.perf_counter()
    for _ in range(iterations):
        rpc.rpc_sync("worker1", ECHO, args=(t,))
    return 2.0 * nbytes * iterations / (time.perf_counter() - start) / 1e9


def run(rank, port, out):
    init_rpc(rank, port, 2)
    if rank == 0:
        one = torch.ones(1)
        for _ in range(500):
            rpc.rpc_sync("worker1", ECHO, args=(one,))
        rtts = []
        for _ in range(5000):
            start = time.perf_counter()
            rpc.rpc_sync("worker1", ECHO, args=(one,))
            rtts.append((time.perf_counter() - start) * 1e6)
        rtts.sort()
        window, calls = [], 20000
        start = time.perf_counter()
        for _ in range(calls):
            if len(window) == 64:
                window.pop(0).wait()
            window.append(rpc.rpc_async("worker1", ECHO, args=(one,)))
        for f in window:
            f.wait()
        calls_per_s = calls / (time.perf_counter() - start)
        result = {
            "rtt_p50_us": round(rtts[len(rtts) // 2], 1),
            "rtt_p99_us": round(rtts[len(rtts) * 99 // 100], 1),
            "calls_per_s": round(calls_per_s),
            "gbps_1mb": round(bandwidth(1 << 20, 500), 2),
            "gbps_64mb": round(bandwidth(64 << 20, 20), 2),
        }
        with open(out, "w") as f:
            json.dump(result, f)
    rpc.shutdown()


if __name__ == "__main__":
    run_two_processes(run, "/tmp/torch_rpc_bench.json")
