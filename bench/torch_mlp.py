"""The DDP benchmarks' model in PyTorch: bench/mlp.h's 4-layer 1024-wide MLP."""
import torch


def mlp():
    torch.manual_seed(0)
    layers = []
    for i in range(4):
        layers.append(torch.nn.Linear(1024, 1024))
        if i < 3:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)
