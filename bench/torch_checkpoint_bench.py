"""PyTorch 1.13's side of bench/checkpoint_bench.cc: torch.save of the same
one-tensor checkpoint (with the position beside it), flushed with fsync as
Tessera's is, then torch.load. One JSON line, median of the rounds.

    torch_checkpoint_bench.py DIR [MiB=1024] [rounds=3]
"""
import json
import os
import statistics
import sys
import time

import torch


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print("usage: torch_checkpoint_bench.py DIR [MiB=1024] [rounds=3]")
        sys.exit(0 if len(sys.argv) > 1 else 2)
    directory = sys.argv[1]
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(1)
    state = {"tensors": {"rows": torch.rand(mib << 18)}, "epoch": 1, "step": 2,
             "samples_seen": 3, "rng_state": torch.rand(4)}
    path = os.path.join(directory, "bench.pt")
    save, load = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        with open(path + ".tmp", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(path + ".tmp", path)
        save.append(time.perf_counter() - start)
        start = time.perf_counter()
        loaded = torch.load(path)
        load.append(time.perf_counter() - start)
        assert torch.equal(loaded["tensors"]["rows"], state["tensors"]["rows"])
    os.remove(path)
    print(json.dumps({"mib": mib, "rounds": rounds,
                      "save_s": round(statistics.median_high(save), 3),
                      "load_s": round(statistics.median_high(load), 3)}))


if __name__ == "__main__":
    main()
