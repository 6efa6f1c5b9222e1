#!/usr/bin/env python3
"""weight_stats.py — are a Llama-family checkpoint's weights heavy-tailed where a
rotation can help group-wise round-to-nearest?

Usage: weight_stats.py MODEL_DIR [--group 64] [--bits 4] [--seed 0] [--json]

For every matrix (rows = outputs, groups of --group along the input dimension):
  kurt        excess kurtosis of all its elements (a Gaussian: 0)
  crest mean  mean over groups of max|w| / rms(w) within the group
  crest max   the largest of those (the Gaussian reference is printed above the table)
  >4          share of groups whose crest exceeds 4 (a Gaussian group of 64: about 0.4 %)
  rot/rtn     estimated squared error of --bits round-to-nearest (MLX's affine rule)
              after `ember quantize --rotate`'s transforms over that without them,
              for inputs of equal energy in every channel: readers of the residual
              stream are compared as W·diag(gain) against (W·diag(gain))·Q, writers as
              W against Qᵀ·W, with the per-head R2 on v_proj and o_proj and the final
              norm folded into the head. Below 1: rotation lowers this matrix's error.
Then a summary per kind (geometric mean of rot/rtn), the spread of the norm
gains, and one JSON line with everything (alone with --json).

Reads *.safetensors (bf16, f16, f32) with numpy only, so it runs without torch.
"""
import argparse
import glob
import json
import math
import os
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


def read_safetensors(path):
    """{name: float32 array} for the float tensors of one file."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__" or t["dtype"] not in DTYPES:
                continue
            a, b = t["data_offsets"]
            f.seek(base + a)
            raw = np.frombuffer(f.read(b - a), dtype=DTYPES[t["dtype"]])
            if t["dtype"] == "BF16":
                raw = (raw.astype(np.uint32) << 16).view(np.float32)
            out[name] = raw.astype(np.float32).reshape(t["shape"])
    return out


def load(model_dir):
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not files:
        sys.exit("weight_stats: no *.safetensors in %s" % model_dir)
    tensors = {}
    for p in files:
        tensors.update(read_safetensors(p))
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    return tensors, cfg.get("text_config", cfg)


def to_bf16(x):
    u = x.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.view(np.float32)


def rtn_error(w, bits, group):
    """Dequantized minus original under MLX's affine rule (scale and bias kept in bf16)."""
    g = w.reshape(w.shape[0], -1, group).astype(np.float32)
    lo, hi = g.min(-1, keepdims=True), g.max(-1, keepdims=True)
    n_bins = float((1 << bits) - 1)
    neg = np.abs(lo) > np.abs(hi)
    s = np.maximum((hi - lo) / n_bins, 1e-7)
    s = np.where(neg, s, -s)
    edge = np.where(neg, lo, hi)
    q0 = np.rint(edge / s)
    s = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), s)
    bias = np.where(q0 != 0, edge, 0.0)
    s, bias = to_bf16(s), to_bf16(bias)
    q = np.clip(np.rint((g - bias) / s), 0, n_bins)
    return (q * s + bias - g).reshape(w.shape)


def rotation(n, rng):
    """A randomized orthogonal n x n matrix: Hadamard with random signs for powers
    of two, a random orthogonal matrix otherwise (same spreading, for an estimate)."""
    if n & (n - 1) == 0:
        h = np.ones((1, 1))
        while h.shape[0] < n:
            h = np.block([[h, h], [h, -h]])
        return (rng.choice([-1.0, 1.0], size=n)[:, None] * h / math.sqrt(n)).astype(np.float32)
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def crest(w, group):
    g = w.reshape(w.shape[0], -1, group).astype(np.float64)
    rms = np.sqrt((g * g).mean(-1))
    c = np.abs(g).max(-1) / np.where(rms > 0, rms, 1)
    return c[rms > 0]


def kurtosis(w):
    x = w.astype(np.float64).ravel()
    x = x - x.mean()
    v = (x * x).mean()
    return float((x ** 4).mean() / (v * v) - 3) if v > 0 else 0.0


def block_rot(r2, n):
    """blockdiag(r2, r2, ...) of size n."""
    k = r2.shape[0]
    out = np.zeros((n, n), dtype=np.float32)
    for i in range(0, n, k):
        out[i:i + k, i:i + k] = r2
    return out


def plan(tensors, cfg, rng):
    """[(label, kind, plain_matrix, plain_col_scale, rotated_matrix)] for every
    matrix that quantization touches, following the --rotate transforms."""
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    r1 = rotation(hidden, rng)
    r2 = rotation(head_dim, rng)
    pre = next((k[:-len("layers.0.input_layernorm.weight")] for k in tensors
                if k.endswith("layers.0.input_layernorm.weight")), "model.")
    out = []
    emb = tensors.get(pre + "embed_tokens.weight")
    fnorm = tensors.get(pre + "norm.weight")
    if emb is not None:
        out.append(("embed", "embed", emb, None, emb @ r1))
        head = tensors.get("lm_head.weight", emb)
        if fnorm is not None:
            lbl = "lm_head" if "lm_head.weight" in tensors else "lm_head (tied)"
            out.append((lbl, "head", head, fnorm, (head * fnorm) @ r1))
    layer_re = re.compile(re.escape(pre) + r"layers\.(\d+)\.(self_attn|mlp)\.(\w+)_proj\.weight$")
    items = []
    for name, w in tensors.items():
        m = layer_re.match(name)
        if m and w.ndim == 2:
            items.append((int(m[1]), m[2], m[3], name, w))
    order = {"q": 0, "k": 1, "v": 2, "o": 3, "gate": 4, "up": 5, "down": 6}
    for layer, block, proj, name, w in sorted(items, key=lambda t: (t[0], order.get(t[2], 9))):
        label = "L%d.%s" % (layer, proj)
        if proj in ("o", "down"):
            rot = r1.T @ w
            if proj == "o" and w.shape[1] % head_dim == 0:
                rot = rot @ block_rot(r2, w.shape[1])
            out.append((label, proj, w, None, rot))
        else:
            norm = "input_layernorm" if block == "self_attn" else "post_attention_layernorm"
            g = tensors.get("%slayers.%d.%s.weight" % (pre, layer, norm))
            if g is None:
                g = np.ones(w.shape[1], dtype=np.float32)
            rot = (w * g) @ r1
            if proj == "v" and w.shape[0] % head_dim == 0:
                rot = block_rot(r2, w.shape[0]).T @ rot
            out.append((label, proj, w, g, rot))
    return out


def gaussian_crest(group, rng):
    c = crest(rng.standard_normal((20000, group)), group)
    return float(c.mean()), float(np.percentile(c, 99.9))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args()
    tensors, cfg = load(args.model)
    rng = np.random.default_rng(args.seed)
    g_mean, g_p999 = gaussian_crest(args.group, rng)
    rows = []
    for label, kind, w, colscale, rot in plan(tensors, cfg, rng):
        r = {"tensor": label, "kind": kind, "shape": list(w.shape), "kurtosis": round(kurtosis(w), 3)}
        if w.shape[1] % args.group == 0:
            c = crest(w, args.group)
            r.update(crest_mean=round(float(c.mean()), 3), crest_max=round(float(c.max()), 3),
                     crest_over4=round(float((c > 4).mean()), 5))
            e = rtn_error(w, args.bits, args.group)
            if colscale is not None:
                e = e * colscale
            plain = float((e.astype(np.float64) ** 2).sum())
            rotated = float((rtn_error(rot, args.bits, args.group).astype(np.float64) ** 2).sum())
            r["rot_over_rtn"] = round(rotated / plain, 4) if plain > 0 else None
        rows.append(r)

    def gmean(v):
        v = [x for x in v if x]
        return round(math.exp(sum(math.log(x) for x in v) / len(v)), 4) if v else None

    summary = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"n": len(rs), "kurtosis_median": round(float(np.median([r["kurtosis"] for r in rs])), 3),
                         "kurtosis_max": max(r["kurtosis"] for r in rs),
                         "crest_mean": round(float(np.mean([r.get("crest_mean", 0) for r in rs])), 3),
                         "crest_max": max(r.get("crest_max", 0) for r in rs),
                         "rot_over_rtn_gmean": gmean([r.get("rot_over_rtn") for r in rs])}
    gains = {}
    for name, t in tensors.items():
        if t.ndim == 1 and name.endswith("norm.weight"):
            a = np.abs(t)
            gains[name] = {"max_over_median": round(float(a.max() / max(np.median(a), 1e-12)), 2),
                           "min": round(float(t.min()), 4), "max": round(float(t.max()), 4)}
    kurts = [r["kurtosis"] for r in rows]
    overall = {"matrices": len(rows), "kurtosis_median": round(float(np.median(kurts)), 3),
               "kurtosis_max": max(kurts), "crest_max": max(r.get("crest_max", 0) for r in rows),
               "rot_over_rtn_gmean": gmean([r.get("rot_over_rtn") for r in rows]),
               "gain_max_over_median": max((g["max_over_median"] for g in gains.values()), default=None)}
    result = {"model": os.path.abspath(args.model), "group": args.group, "bits": args.bits,
              "gaussian_crest_mean": round(g_mean, 3), "gaussian_crest_p99.9": round(g_p999, 3),
              "overall": overall, "by_kind": summary, "norm_gains": gains, "tensors": rows}
    if not args.json:
        print("%s: %d matrices, groups of %d along the input; a Gaussian group's crest: mean %.2f, "
              "99.9th percentile %.2f" % (args.model, len(rows), args.group, g_mean, g_p999))
        print("rot/rtn: estimated %d-bit squared error with the --rotate transforms over without "
              "(< 1: rotation helps)\n" % args.bits)
        print("%-16s %-12s %8s %10s %9s %7s %8s" % ("tensor", "shape", "kurt", "crest mean", "crest max", ">4 %",
                                                  "rot/rtn"))
        for r in rows:
            print("%-16s %-12s %8.2f %10.2f %9.2f %7.2f %8s" % (
                r["tensor"], "x".join(map(str, r["shape"])), r["kurtosis"], r.get("crest_mean", float("nan")),
                r.get("crest_max", float("nan")), 100 * r.get("crest_over4", float("nan")),
                "%.3f" % r["rot_over_rtn"] if r.get("rot_over_rtn") else "-"))
        print("\n%-8s %3s %11s %9s %10s %9s %8s" % ("kind", "n", "kurt median", "kurt max", "crest mean",
                                                   "crest max", "rot/rtn"))
        for k, s in summary.items():
            print("%-8s %3d %11.2f %9.2f %10.2f %9.2f %8s" % (
                k, s["n"], s["kurtosis_median"], s["kurtosis_max"], s["crest_mean"], s["crest_max"],
                "%.3f" % s["rot_over_rtn_gmean"] if s["rot_over_rtn_gmean"] else "-"))
        if gains:
            worst = max(gains.items(), key=lambda kv: kv[1]["max_over_median"])
            print("\nnorm gains: largest max/median %.2f (%s, range %.3f .. %.3f)" % (
                worst[1]["max_over_median"], worst[0], worst[1]["min"], worst[1]["max"]))
        print("overall: kurtosis median %.2f max %.2f, crest max %.2f, rot/rtn geometric mean %s\n" % (
            overall["kurtosis_median"], overall["kurtosis_max"], overall["crest_max"], overall["rot_over_rtn_gmean"]))
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
