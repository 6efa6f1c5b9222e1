#!/usr/bin/env python3
"""Compares two safetensors checkpoints (single file or sharded directories)
tensor by tensor: same names, dtypes, shapes and bytes. Prints the first
differences; exit 1 when any."""
import json, os, struct, sys


def tensors(path):
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    out = {}
    for fn in files:
        with open(fn, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
            base = 8 + n
            for k, v in hdr.items():
                if k == "__metadata__":
                    continue
                a, b = v["data_offsets"]
                f.seek(base + a)
                out[k] = (v["dtype"], v["shape"], f.read(b - a))
    return out


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
bad = 0
if set(a) != set(b):
    print("names differ:", sorted(set(a) ^ set(b))[:10])
    bad += 1
for k in sorted(set(a) & set(b)):
    if a[k][:2] != b[k][:2]:
        print(f"{k}: {a[k][:2]} vs {b[k][:2]}")
        bad += 1
    elif a[k][2] != b[k][2]:
        diff = sum(x != y for x, y in zip(a[k][2], b[k][2]))
        print(f"{k}: {diff} of {len(a[k][2])} bytes differ")
        bad += 1
print(f"{'ok  ' if not bad else 'FAIL'} {len(a)} tensors compared, {bad} differ")
sys.exit(1 if bad else 0)
