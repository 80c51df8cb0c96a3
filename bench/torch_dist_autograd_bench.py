"""The workloads of bench/dist_autograd_bench.cc with PyTorch 1.13's
torch.distributed.autograd and DistributedOptimizer (TensorPipe backend),
three processes on loopback. Prints one JSON object with the same keys.
Run with /usr/bin/python3."""
import json
import statistics
import threading
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn.functional as F
from torch.distributed.optim import DistributedOptimizer
from torch_two_processes import init_rpc, run_processes

STAGES, WIDTH, BATCH = 8, 64, 64
SCALE = torch.full((1, WIDTH), 1.001, requires_grad=True)
MODELS = {}
LOCK = threading.Lock()


def scale(x):
    return x * SCALE


def mlp_forward(p, x):
    return F.linear(F.relu(F.linear(x.flatten(1), p[0], p[1])), p[2], p[3])


def cnn_forward(p, x):
    x = F.max_pool2d(F.relu(F.conv2d(x, p[0], p[1])), 2)
    x = F.max_pool2d(F.relu(F.conv2d(x, p[2], p[3])), 2)
    x = F.relu(F.linear(x.flatten(1), p[4], p[5]))
    return F.linear(x, p[6], p[7])


def uniform(shape, fan_in):
    bound = fan_in ** -0.5
    return torch.empty(shape).uniform_(-bound, bound).requires_grad_()


def make_models():
    torch.manual_seed(0)
    mlp = [torch.randn(128, 784) * 0.03, torch.zeros(128), torch.randn(10, 128) * 0.08,
           torch.zeros(10)]
    cnn = [uniform((32, 1, 3, 3), 9), uniform((32,), 9), uniform((64, 32, 3, 3), 288),
           uniform((64,), 288), uniform((128, 1600), 1600), uniform((128,), 1600),
           uniform((10, 128), 128), uniform((10,), 128)]
    return {"mlp": ([p.requires_grad_() for p in mlp], mlp_forward, (BATCH, 784)),
            "cnn": (cnn, cnn_forward, (BATCH, 1, 28, 28))}


def params(name):
    return [rpc.RRef(p) for p in MODELS[name][0]]


def forward(name, x):
    model, fn, _ = MODELS[name]
    with LOCK:  # the same snapshot as Tessera's server (see parameter_server.h)
        snapshot = [p.clone() for p in model]
    return fn(snapshot, x)


def train(name, steps):
    shape = MODELS[name][2]
    opt = DistributedOptimizer(torch.optim.Adam, rpc.rpc_sync("worker0", params, args=(name,)),
                               lr=1e-3)
    x, y = torch.randn(shape), torch.randint(0, 10, (BATCH,))

    def step():
        with dist_autograd.context() as cid:
            out = rpc.rpc_sync("worker0", forward, args=(name, x))
            dist_autograd.backward(cid, [F.cross_entropy(out, y)])
            opt.step(cid)

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def edge_overhead():
    x = torch.randn(1, WIDTH, requires_grad=True)
    w = torch.full((1, WIDTH), 1.001, requires_grad=True)
    local, dist = [], []
    for _ in range(300):
        y = x
        for _ in range(STAGES):
            y = y * w
        loss = y.sum()
        start = time.perf_counter()
        loss.backward()
        local.append((time.perf_counter() - start) * 1e6)
    for _ in range(300):
        with dist_autograd.context() as cid:
            y = x
            for _ in range(STAGES):
                y = rpc.rpc_sync("worker1", scale, args=(y,))
            loss = y.sum()
            start = time.perf_counter()
            dist_autograd.backward(cid, [loss])
            dist.append((time.perf_counter() - start) * 1e6)
    l, d = statistics.median(local), statistics.median(dist)
    return {"backward_local_us": l, "backward_dist_us": d, "edges": 2.0 * STAGES,
            "overhead_per_edge_us": (d - l) / (2 * STAGES)}


def run(rank, port, out):
    torch.set_num_threads(1)
    MODELS.update(make_models())
    init_rpc(rank, port, 3, num_worker_threads=16)
    if rank == 0:
        results = edge_overhead()
        for name, steps in (("mlp", 300), ("cnn", 40)):
            futs = [rpc.rpc_async(f"worker{r}", train, args=(name, steps)) for r in (1, 2)]
            seconds = max(f.wait() for f in futs)
            results[f"ps_{name}_updates_per_s"] = 2 * steps / seconds
        with open(out, "w") as f:
            json.dump({k: round(v, 1) for k, v in results.items()}, f)
    rpc.shutdown()


if __name__ == "__main__":
    run_processes(run, "/tmp/torch_dist_autograd_bench.json", 3)
