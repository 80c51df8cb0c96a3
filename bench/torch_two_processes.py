"""Shared launcher for the PyTorch comparison scripts: runs `run(rank, port,
out)` in `nprocs` spawned processes (a free loopback port for their
rendezvous), then prints the JSON that rank 0 wrote to `out` (argv[1], or
`default_out`)."""
import socket
import sys

import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(run, default_out, nprocs):
    out = sys.argv[1] if len(sys.argv) > 1 else default_out
    mp.spawn(run, args=(free_port(), out), nprocs=nprocs, join=True)
    with open(out) as f:
        print(f.read())


def run_two_processes(run, default_out):
    run_processes(run, default_out, 2)
