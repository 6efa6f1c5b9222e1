#!/usr/bin/env python3
"""Compares two little-endian float32 logit files of the same shape.
Fails when the max abs difference exceeds --rel times the reference range."""
import argparse, array, sys

ap = argparse.ArgumentParser()
ap.add_argument("got")
ap.add_argument("want")
ap.add_argument("--rel", type=float, default=1e-3)
ap.add_argument("--name", default="")
a = ap.parse_args()
g, w = array.array("f"), array.array("f")
g.frombytes(open(a.got, "rb").read())
w.frombytes(open(a.want, "rb").read())
if len(g) != len(w):
    print(f"FAIL {a.name}: {len(g)} values, reference has {len(w)}")
    sys.exit(1)
rng = max(w) - min(w)
err = max(abs(x - y) for x, y in zip(g, w))
ok = err <= a.rel * rng
print(f"{'ok  ' if ok else 'FAIL'} {a.name} logits: max abs err {err:.3e} = {err / rng:.2e} of range {rng:.2f}")
sys.exit(0 if ok else 1)
