"""The workloads of bench/rref_bench.cc with PyTorch's RRefs
(torch.distributed.rpc, TensorPipe backend), two processes on loopback.
Prints one JSON object with the same keys. Run with /usr/bin/python3."""
import json
import time

import torch.distributed.rpc as rpc
from torch_two_processes import init_rpc, run_two_processes


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, delta):
        self.value += delta
        return self.value


def echo(v):
    return v


def await_owned(n):
    # Polls the owner's RRef table until it holds n values (PyTorch exposes no
    # wait); the polling interval bounds the measurement's resolution.
    deadline = time.time() + 60
    while time.time() < deadline:
        info = rpc.api._get_current_rpc_agent().get_debug_info()
        if int(info.get("num_owner_rrefs", 0)) == n:
            return True
        time.sleep(0.0005)
    return False


def run(rank, port, out):
    init_rpc(rank, port, 2)
    if rank == 0:
        def remote_method():
            counter = rpc.remote("worker1", Counter, args=(0,))
            return counter.rpc_sync().add(1)

        def remote_fetch(i):
            return rpc.remote("worker1", echo, args=(i,)).to_here()

        for i in range(300):
            remote_method()
            remote_fetch(i)
        method_us, fetch_us = [], []
        for i in range(3000):
            start = time.perf_counter()
            remote_method()
            method_us.append((time.perf_counter() - start) * 1e6)
            start = time.perf_counter()
            remote_fetch(i)
            fetch_us.append((time.perf_counter() - start) * 1e6)
        method_us.sort()
        fetch_us.sort()
        n = 10000
        start = time.perf_counter()
        for i in range(n):
            rpc.remote("worker1", echo, args=(i,))
        rpc.rpc_sync("worker1", await_owned, args=(0,))
        rate = n / (time.perf_counter() - start)
        with open(out, "w") as f:
            json.dump({
                "remote_method_p50_us": round(method_us[len(method_us) // 2], 1),
                "remote_method_p99_us": round(method_us[len(method_us) * 99 // 100], 1),
                "remote_to_here_p50_us": round(fetch_us[len(fetch_us) // 2], 1),
                "rrefs_per_s": round(rate),
            }, f)
    rpc.shutdown()


if __name__ == "__main__":
    run_two_processes(run, "/tmp/torch_rref_bench.json")
