"""The workload of bench/zero_bench.cc with PyTorch 1.13: DDP (Gloo) + Adam
vs DDP + ZeroRedundancyOptimizer(Adam), a 4-layer 1024-wide MLP, batch 64,
one thread per process, world size 2, interleaved rounds. Prints one JSON
object with the same keys. Run with /usr/bin/python3."""
import json
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_mlp import mlp
from torch_two_processes import run_two_processes

WARM_UP, ROUNDS = 2, 15


def state_bytes(optimizer):
    return sum(s[k].numel() * s[k].element_size()
               for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq"))


def timed(step):
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1e3


def median(values):
    return sorted(values)[len(values) // 2]


def run(rank, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x, y = torch.randn(64, 1024), torch.randn(64, 1024)
    plain_model, zero_model = DDP(mlp()), DDP(mlp())
    plain = torch.optim.Adam(plain_model.parameters(), lr=1e-3)
    zero = ZeroRedundancyOptimizer(zero_model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)

    def step(model, optimizer):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    plain_ms, zero_ms, ratios = [], [], []
    for round_ in range(WARM_UP + ROUNDS):
        p = timed(lambda: step(plain_model, plain))
        z = timed(lambda: step(zero_model, zero))
        if round_ >= WARM_UP:
            plain_ms.append(p)
            zero_ms.append(z)
            ratios.append(z / p)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"adam_ms": median(plain_ms), "zero_ms": median(zero_ms),
                       "ratio": median(ratios), "adam_state_bytes": state_bytes(plain),
                       "zero_state_bytes": state_bytes(zero.optim)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_two_processes(run, "/tmp/torch_zero_bench.json")
