"""The recommender of examples/ps_recommender with PyTorch 1.13's RPC, split
the same way: 2 servers hold the embedding tables (each field's ids split
by id % 2, torch.nn.Embedding(sparse=True)) and the MLPs' weights (on
server 0); 2 trainers compute — per step they fetch their batch's distinct
rows and the MLPs' weights by RPC inside a distributed autograd context,
forward and backward locally, and step the servers' Adagrad through a
DistributedOptimizer (asynchronous: no trainer waits for another, as
Tessera's --consistency async). Same data (bench/click_data_writer), model,
batch, learning rate and threads (1 a process).
  python3 torch_ps_recommender.py DATA_DIR [max samples per trainer]
Prints each trainer's samples/s, and the test AUC of the final model."""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.optim import DistributedOptimizer
from torch_two_processes import free_port, init_rpc

FIELDS, DENSE, DIM, HIDDEN, VOCAB = 4, 8, 16, 64, 100000
SERVERS, TRAINERS, BATCH, LR = 2, 2, 256, 0.05
TABLES = None  # on a server: its shard of each field's embedding table
MLP = None  # on server 0
FINISHED = []


def make_server(rank):
    global TABLES, MLP
    torch.manual_seed(rank)
    TABLES = [torch.nn.Embedding((VOCAB + SERVERS - 1) // SERVERS, DIM, sparse=True)
              for _ in range(FIELDS)]
    for t in TABLES:
        torch.nn.init.uniform_(t.weight, -0.05, 0.05)
    if rank == 0:
        pairs = (FIELDS + 1) * FIELDS // 2
        MLP = torch.nn.ModuleList([torch.nn.Linear(DENSE, HIDDEN), torch.nn.Linear(HIDDEN, DIM),
                                   torch.nn.Linear(DIM + pairs, HIDDEN), torch.nn.Linear(HIDDEN, 1)])


class SparseRows(torch.autograd.Function):
    """weight[ids], its gradient a sparse tensor of those rows. Unlike
    nn.Embedding's backward it keeps no reference to the weight, which the
    other trainer's optimizer steps in place between this one's forward and
    backward (nn.Embedding fails there: "modified by an inplace operation")."""

    @staticmethod
    def forward(ctx, weight, ids):
        ctx.ids, ctx.shape = ids, weight.shape
        return weight.index_select(0, ids)

    @staticmethod
    def backward(ctx, grad):
        return torch.sparse_coo_tensor(ctx.ids.unsqueeze(0), grad, ctx.shape), None


def lookup(field, local_ids):
    return SparseRows.apply(TABLES[field].weight, local_ids)


def mlp_parameters():
    return list(MLP.parameters())


def parameter_rrefs():
    params = [t.weight for t in TABLES] + (list(MLP.parameters()) if MLP is not None else [])
    return [rpc.RRef(p) for p in params]


def finished():
    FINISHED.append(1)
    return len(FINISHED)


def finished_count():
    return len(FINISHED)


def forward(p, dense, embeddings):
    bottom = F.relu(F.linear(F.relu(F.linear(dense, p[0], p[1])), p[2], p[3]))
    z = torch.stack([bottom] + embeddings, 1)
    n = FIELDS + 1
    gram = torch.bmm(z, z.transpose(1, 2)).reshape(-1, n * n)
    pairs = torch.triu_indices(n, n, 1)
    interactions = gram.index_select(1, pairs[0] * n + pairs[1])
    top = F.relu(F.linear(torch.cat([bottom, interactions], 1), p[4], p[5]))
    return F.linear(top, p[6], p[7]).squeeze(1)


def pull(ids):
    """The batch's embeddings (recorded by distributed autograd) and the MLP's weights."""
    futures, orders, inverses = [], [], []
    for f in range(FIELDS):
        unique, inverse = torch.unique(ids[:, f], return_inverse=True)
        inverses.append(inverse)
        order, parts = [], []
        for s in range(SERVERS):
            mask = unique % SERVERS == s
            order.append(mask.nonzero().squeeze(1))
            parts.append(rpc.rpc_async(f"worker{s}", lookup, args=(f, unique[mask] // SERVERS)))
        orders.append(torch.cat(order))
        futures.append(parts)
    params = rpc.rpc_async("worker0", mlp_parameters)
    embeddings = []
    for f in range(FIELDS):
        rows = torch.cat([p.wait() for p in futures[f]])
        rows = rows[torch.argsort(orders[f])]  # back in the order of the unique ids
        embeddings.append(rows[inverses[f]])
    return params.wait(), embeddings


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels > 0.5
    p, n = positives.sum(), (~positives).sum()
    return (ranks[positives].sum() - p * (p + 1) / 2) / (p * n)


def load(data_dir, name, dtype, width):
    array = np.fromfile(os.path.join(data_dir, name), dtype=dtype)
    return torch.from_numpy(array.reshape(-1, width) if width else array)


def run(rank, port, data_dir, max_samples):
    torch.set_num_threads(1)
    if rank < SERVERS:
        make_server(rank)
    init_rpc(rank, port, SERVERS + TRAINERS, num_worker_threads=16)
    if rank >= SERVERS:
        trainer = rank - SERVERS
        ids = load(data_dir, "train_ids.bin", np.int64, FIELDS)[trainer::TRAINERS]
        dense = load(data_dir, "train_dense.bin", np.float32, DENSE)[trainer::TRAINERS]
        clicks = load(data_dir, "train_clicks.bin", np.float32, 0)[trainer::TRAINERS]
        rrefs = [r for s in range(SERVERS)
                 for r in rpc.rpc_sync(f"worker{s}", parameter_rrefs)]
        optimizer = DistributedOptimizer(torch.optim.Adagrad, rrefs, lr=LR)
        steps = min(len(clicks), max_samples) // BATCH
        start = time.time()
        for step in range(steps):
            batch = slice(step * BATCH, (step + 1) * BATCH)
            with dist_autograd.context() as context:
                params, embeddings = pull(ids[batch])
                loss = F.binary_cross_entropy_with_logits(
                    forward(params, dense[batch], embeddings), clicks[batch])
                dist_autograd.backward(context, [loss])
                optimizer.step(context)
        seconds = time.time() - start
        print(f"[torch trainer{trainer}] trained {steps * BATCH} samples in {seconds:.2f} s: "
              f"{steps * BATCH / seconds:.0f} samples/s", flush=True)
        rpc.rpc_sync("worker0", finished)
        while rpc.rpc_sync("worker0", finished_count) < TRAINERS:
            time.sleep(0.05)  # polling for the other trainer; not measured
        if trainer == 0:
            test_ids = load(data_dir, "test_ids.bin", np.int64, FIELDS)
            with torch.no_grad():
                params, embeddings = pull(test_ids)
                scores = torch.sigmoid(forward(
                    params, load(data_dir, "test_dense.bin", np.float32, DENSE), embeddings))
            labels = load(data_dir, "test_clicks.bin", np.float32, 0).numpy()
            truth = load(data_dir, "test_truth.bin", np.float32, 0).numpy()
            print(f"[torch trainer0] test AUC {auc(scores.numpy(), labels):.4f} "
                  f"(ground truth {auc(truth, labels):.4f})", flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    max_samples = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 40
    mp.spawn(run, args=(free_port(), sys.argv[1], max_samples), nprocs=SERVERS + TRAINERS,
             join=True)
