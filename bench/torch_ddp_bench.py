"""The workload of bench/ddp_bench.cc with PyTorch 1.13's DDP (Gloo): a
4-layer 1024-wide MLP, batch 64, one thread per process, world size 2.
Prints one JSON object with the same keys. Run with /usr/bin/python3."""
import json
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_two_processes import run_two_processes

STEPS = 15


def mlp():
    torch.manual_seed(0)
    layers = []
    for i in range(4):
        layers.append(torch.nn.Linear(1024, 1024))
        if i < 3:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def median_step_ms(model, params):
    opt = torch.optim.SGD(params, lr=0.01)
    x, y = torch.randn(64, 1024), torch.randn(64, 1024)
    ms = []
    for step in range(STEPS + 2):
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step >= 2:
            ms.append((time.perf_counter() - start) * 1e3)
    ms.sort()
    return ms[len(ms) // 2]


def run(rank, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    result = {}
    if rank == 0:
        m = mlp()
        result["local_ms"] = median_step_ms(m, m.parameters())
    dist.barrier()
    for mb in (1, 5, 25, 100):
        m = mlp()
        ddp = DDP(m, bucket_cap_mb=mb)
        result[f"ddp_{mb}mb_ms"] = median_step_ms(ddp, ddp.parameters())
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_two_processes(run, "/tmp/torch_ddp_bench.json")
