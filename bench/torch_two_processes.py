"""Shared launcher for the PyTorch comparison scripts: runs `run(rank, port,
out)` in `nprocs` spawned processes (a free loopback port for their
rendezvous), then prints the JSON that rank 0 wrote to `out` (argv[1], or
`default_out`)."""
import os
import socket
import sys

import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_rpc(rank, port, world_size, num_worker_threads=8):
    """torch.distributed.rpc as worker<rank>, meeting on loopback `port`."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=num_worker_threads,
                                           rpc_timeout=600)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=opts)


def run_processes(run, default_out, nprocs):
    out = sys.argv[1] if len(sys.argv) > 1 else default_out
    mp.spawn(run, args=(free_port(), out), nprocs=nprocs, join=True)
    with open(out) as f:
        print(f.read())


def run_two_processes(run, default_out):
    run_processes(run, default_out, 2)
