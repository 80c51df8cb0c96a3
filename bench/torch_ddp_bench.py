"""The workload of bench/ddp_bench.cc with PyTorch 1.13's DDP (Gloo): a
4-layer 1024-wide MLP, batch 64, one thread per process, world size 2; each
round a local step on both ranks (a replica without DDP), then a DDP step.
Prints one JSON object with the same keys. DDP_COMM_HOOK=fp16 or bf16
registers PyTorch's fp16_compress_hook or bf16_compress_hook, powersgd:R its
powerSGD_hook at rank R (start_powerSGD_iter 2, as Tessera's). Run with
/usr/bin/python3."""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_mlp import mlp
from torch_two_processes import run_two_processes

WARM_UP, ROUNDS = 2, 15


class Stepper:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(self, x, y):
        start = time.perf_counter()
        self.opt.zero_grad()
        torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.opt.step()
        return (time.perf_counter() - start) * 1e3


def median(values):
    return sorted(values)[len(values) // 2]


def run(rank, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x, y = torch.randn(64, 1024), torch.randn(64, 1024)
    result = {}
    for mb in (1, 5, 25, 100):
        local = Stepper(mlp())
        model = DDP(mlp(), bucket_cap_mb=mb)
        hook = os.environ.get("DDP_COMM_HOOK", "")
        if hook.startswith("powersgd"):
            rank_r = int(hook.split(":")[1]) if ":" in hook else 1
            state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=rank_r,
                                           start_powerSGD_iter=2, min_compression_rate=2)
            model.register_comm_hook(state, powerSGD.powerSGD_hook)
        elif hook in ("fp16", "bf16"):
            try:
                model.register_comm_hook(None, getattr(default_hooks, f"{hook}_compress_hook"))
            except TypeError as e:  # 1.13's bf16 hook: "required CUDA 11+ and NCCL 2.10+"
                result = {"unsupported": str(e)}
                break
        replicated = Stepper(model)
        local_ms, ddp_ms, ratios = [], [], []
        for round_ in range(WARM_UP + ROUNDS):
            l, d = local.step(x, y), replicated.step(x, y)
            if round_ >= WARM_UP:
                local_ms.append(l)
                ddp_ms.append(d)
                ratios.append(d / l)
        result[f"local_{mb}mb_ms"] = median(local_ms)
        result[f"ddp_{mb}mb_ms"] = median(ddp_ms)
        result[f"overhead_{mb}mb"] = median(ratios) - 1
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_two_processes(run, "/tmp/torch_ddp_bench.json")
