#!/usr/bin/env python3
"""activation_stats.py — where a Llama-family checkpoint keeps massive
activations, and what folding its norm gains (as `ember quantize --rotate`
must) costs weight-only quantization there.

Usage: activation_stats.py MODEL_DIR TEXT_FILE [--ember BIN] [--tokens 256] [--top 3]

Runs the model in float64 with numpy over the first --tokens tokens of TEXT_FILE
(token ids from `ember tokenize`), and prints for each norm that feeds a matrix
(each layer's attention and MLP norm):
  top dims     the residual channels with the most energy after normalization
               (x̂ = x / rms(x)), their share x̂² / mean(x̂²), and their gains
  gain median  the median |gain| of the norm
  fold cost    mean(g²)·mean(x̂²) / mean(g²·x̂²): how much more output error the
               same per-weight rounding error gives once the gain is folded into
               the weights. Kept apart, a rounding error in column j reaches the
               output scaled by g_j·x̂_j; folded, by x̂_j alone at the step of
               W·diag(g). Channels with massive x̂ and a small gain make it > 1.
Reads *.safetensors (bf16, f16, f32) with weight_stats.py's reader; needs numpy.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weight_stats import load  # noqa: E402


def rms_norm(x, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def rope_tables(T, hd, theta):
    inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    ang = np.outer(np.arange(T), inv)
    return np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))


def report(label, x, g, top):
    xh = rms_norm(x, 0.0)
    e = (xh * xh).mean(0)
    g = np.abs(g.astype(np.float64))
    order = np.argsort(e)[::-1][:top]
    dims = ", ".join("%d: %.1fx gain %.2f" % (d, e[d] / e.mean(), g[d]) for d in order)
    cost = (g * g).mean() * e.mean() / ((g * g) * e).mean()
    print("%-10s top dims %-58s gain median %.2f  fold cost %.2f" % (label, dims, np.median(g), cost))
    return cost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--ember", default=os.path.join(os.path.dirname(__file__), "../../build/ember"))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--top", type=int, default=3)
    a = ap.parse_args()
    t, cfg = load(a.model)
    text = open(a.text, encoding="utf-8").read()[: a.tokens * 8]
    ids = json.loads(subprocess.check_output([a.ember, "tokenize", a.model, text]))[: a.tokens]
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv, L = cfg.get("num_key_value_heads", nh), cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or H // nh
    eps, T = cfg.get("rms_norm_eps", 1e-6), len(ids)
    cos, sin = rope_tables(T, hd, cfg.get("rope_theta", 10000.0))

    def rope(q):
        return q * cos[:, None, :] + np.concatenate([-q[..., hd // 2:], q[..., : hd // 2]], -1) * sin[:, None, :]

    def w(name):
        return t[name].astype(np.float64)

    x = w("model.embed_tokens.weight")[ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    costs = []
    print("%d tokens of %s" % (T, a.text))
    for layer in range(L):
        p = "model.layers.%d." % layer
        g = t[p + "input_layernorm.weight"]
        costs.append(report("L%d attn" % layer, x, g, a.top))
        h = rms_norm(x, eps) * g
        q = rope((h @ w(p + "self_attn.q_proj.weight").T).reshape(T, nh, hd))
        k = rope((h @ w(p + "self_attn.k_proj.weight").T).reshape(T, nkv, hd)).repeat(nh // nkv, 1)
        v = (h @ w(p + "self_attn.v_proj.weight").T).reshape(T, nkv, hd).repeat(nh // nkv, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd) @ w(p + "self_attn.o_proj.weight").T
        g = t[p + "post_attention_layernorm.weight"]
        costs.append(report("L%d mlp" % layer, x, g, a.top))
        h = rms_norm(x, eps) * g
        gate, up = h @ w(p + "mlp.gate_proj.weight").T, h @ w(p + "mlp.up_proj.weight").T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w(p + "mlp.down_proj.weight").T
    print("fold cost: median %.2f, max %.2f (1: folding is free)" % (np.median(costs), max(costs)))


if __name__ == "__main__":
    main()
