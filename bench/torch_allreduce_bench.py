"""The workload of bench/allreduce_bench.cc with PyTorch's Gloo process group
(torch.distributed, ALLREDUCE_WORLD processes on loopback, 2 by default).
Prints one JSON object with the same keys. Run with /usr/bin/python3
(Debian's python3-torch 1.13)."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch_two_processes import run_processes

SIZES = [int(s) for s in os.environ["ALLREDUCE_SIZES"].split(",")] if "ALLREDUCE_SIZES" in os.environ \
    else [4, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20, 256 << 20]
WORLD = int(os.environ.get("ALLREDUCE_WORLD", "2"))


def iterations(nbytes):
    if "ALLREDUCE_ITERATIONS" in os.environ:
        return max(1, int(os.environ["ALLREDUCE_ITERATIONS"]))
    return 5 if nbytes >= (64 << 20) else 20 if nbytes >= (4 << 20) else 200


def run(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    result = {}
    for nbytes in SIZES:
        t = torch.ones(nbytes // 4)
        dist.all_reduce(t)
        us = []
        for _ in range(iterations(nbytes)):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            us.append((time.perf_counter() - start) * 1e6)
        us.sort()
        median = us[len(us) // 2]
        if rank == 0 and "ALLREDUCE_QUARTILES" in os.environ:
            print(f"{nbytes} bytes: p25 {us[len(us) // 4]:.0f} p50 {median:.0f} "
                  f"p75 {us[len(us) * 3 // 4]:.0f} p90 {us[len(us) * 9 // 10]:.0f} us",
                  file=sys.stderr)
        result[str(nbytes)] = [median, 2.0 * (WORLD - 1) / WORLD * nbytes / (median * 1e-6) / 1e9]
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_processes(run, "/tmp/torch_allreduce_bench.json", WORLD)
