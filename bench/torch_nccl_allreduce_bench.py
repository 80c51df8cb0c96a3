"""The workload of bench/nccl_allreduce_bench.cc with PyTorch's NCCL process
group: one rank per visible GPU, CPU tensors staged to the GPU and back around
each allreduce (what Tessera does with a CPU LibTorch), and, as the floor, the
same allreduce on a tensor that stays on the GPU. Prints one JSON object:
{"staged": {bytes: [median us, GB/s]}, "resident": {...}}. Needs a CUDA build
of PyTorch (not Debian's), so it runs on a GPU machine only."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [int(s) for s in os.environ["ALLREDUCE_SIZES"].split(",")] if "ALLREDUCE_SIZES" in os.environ \
    else [4, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20, 256 << 20]


def iterations(nbytes):
    if "ALLREDUCE_ITERATIONS" in os.environ:
        return max(1, int(os.environ["ALLREDUCE_ITERATIONS"]))
    return 5 if nbytes >= (64 << 20) else 20 if nbytes >= (4 << 20) else 200


def bandwidth(world, nbytes, median_us):
    factor = 2.0 * (world - 1) / world if world > 1 else 1.0
    return factor * nbytes / (median_us * 1e-6) / 1e9


def timed(world, nbytes, step):
    step()
    torch.cuda.synchronize()
    us = []
    for _ in range(iterations(nbytes)):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        us.append((time.perf_counter() - start) * 1e6)
    us.sort()
    median = us[len(us) // 2]
    return [median, bandwidth(world, nbytes, median)]


def run(rank, world, port, out):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    result = {"staged": {}, "resident": {}}
    for nbytes in SIZES:
        host = torch.ones(nbytes // 4).pin_memory() if os.environ.get("PINNED") else torch.ones(nbytes // 4)
        device = torch.ones(nbytes // 4, device="cuda")

        def staged():
            on_gpu = host.cuda()
            dist.all_reduce(on_gpu)
            host.copy_(on_gpu)

        result["staged"][str(nbytes)] = timed(world, nbytes, staged)
        result["resident"][str(nbytes)] = timed(world, nbytes, lambda: dist.all_reduce(device))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else torch.cuda.device_count()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = "/tmp/torch_nccl_allreduce_bench.json"
    mp.spawn(run, args=(world, port, out), nprocs=world)
    with open(out) as f:
        print(f.read())
