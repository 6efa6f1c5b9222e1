#!/usr/bin/env python3
"""Compares two result files of `--batch` renders line by line: outputs
must be byte-identical, and a case must fail in both or in neither."""
import json
import sys

cases = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
ref = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
got = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8") if l.strip()]
if not (len(cases) == len(ref) == len(got)):
    print(f"result counts differ: {len(cases)} cases, {len(ref)} reference, {len(got)} ember")
    sys.exit(1)
bad = 0
for c, r, g in zip(cases, ref, got):
    if r["ok"] != g["ok"] or (r["ok"] and r["output"] != g["output"]):
        bad += 1
        print(f"MISMATCH {c.get('name')}: template {c['template']!r}")
        print(f"  jinja2: {r.get('output', r.get('error'))!r}")
        print(f"  ember:  {g.get('output', g.get('error'))!r}")
print(f"{len(cases) - bad}/{len(cases)} cases agree")
sys.exit(1 if bad else 0)
