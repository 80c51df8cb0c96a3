"""Prints two benchmark JSON objects (Tessera's, PyTorch's) side by side with
their ratio (ours / PyTorch) per key. Usage: ratio_table.py OURS THEIRS."""
import json
import sys

ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
width = max(len(k) for k in ours) + 2
print(f"{'metric':<{width}}{'tessera':>12}{'pytorch':>12}{'ratio':>10}")
for key in ours:
    r = ours[key] / theirs[key] if theirs.get(key) else float('nan')
    print(f"{key:<{width}}{ours[key]:>12}{theirs.get(key, float('nan')):>12}{r:>10.2f}")
