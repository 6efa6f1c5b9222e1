#!/usr/bin/env python3
"""llama2c_synth.py — a small random llama2.c checkpoint, its tokenizer.bin, and
what llama2.c's run.c computes for them, as references for
tools/llama2c/convert.py.

Usage:
  llama2c_synth.py write DIR            DIR/model.bin, DIR/tokenizer.bin
  llama2c_synth.py encode DIR TEXT      run.c's token ids (BOS, dummy prefix,
                                        byte fallback, merges by score), JSON
  llama2c_synth.py logits DIR IDS OUT   run.c's forward (adjacent-pair RoPE,
                                        unpermuted weights) in float64; OUT: the
                                        [len(IDS), vocab] logits as little-endian f32

The model: dim 144 (a Hadamard order of two Paley factors, 12·12), 3 heads of
48, 1 key/value head (grouped queries), MLP 96, 2 layers, an untied classifier
(negative vocab_size in the header). The tokenizer: <unk>, <s>, </s>, the 256
byte tokens spelled <0xXX> as llama2.c's export writes them, then single
characters and merged pieces with scores in no particular order of id.
Standard library only.
"""
import json
import math
import random
import struct
import sys

DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, SEQ = 144, 96, 2, 3, 1, 64
CHARS = " abcdefghijklmnopqrstuvwxy"  # no "z": it falls back to bytes
MERGED = [" o", "on", "ce", "nce", " on", " once", "up", " up", "upon", " upon", " a", "ti", "me", "time",
          " time", "th", " th", "the", " the", "ca", " ca", " cat", "at", "ate", " ate", "er", "re", "ra",
          "eb", "br", "bra"]


def pieces():
    """[(text, score)] in id order, as tokenizer.bin spells them."""
    rng = random.Random(7)
    out = [("<unk>", 0.0), ("\n<s>\n", 0.0), ("\n</s>\n", 0.0)]
    out += [("<0x%02X>" % b, 0.0) for b in range(256)]
    out += [(c, rng.uniform(-50, -10)) for c in CHARS]
    out += [(m, rng.uniform(-9, -1)) for m in MERGED]
    return out


def dims():
    return len(pieces()), DIM // HEADS


def weights():
    """{name: flat list} in llama2.c's order, seeded."""
    vocab, hd = dims()
    rng = random.Random(11)
    kv = KV_HEADS * hd

    def mat(n, scale=0.08):
        return [rng.gauss(0.0, scale) for _ in range(n)]

    def gains(n):
        return [rng.uniform(0.5, 1.5) for _ in range(n)]

    return [("embed", mat(vocab * DIM, 0.5)), ("rms_att", gains(LAYERS * DIM)),
            ("wq", mat(LAYERS * DIM * DIM)), ("wk", mat(LAYERS * kv * DIM)), ("wv", mat(LAYERS * kv * DIM)),
            ("wo", mat(LAYERS * DIM * DIM)), ("rms_ffn", gains(LAYERS * DIM)), ("w1", mat(LAYERS * HIDDEN * DIM)),
            ("w2", mat(LAYERS * DIM * HIDDEN)), ("w3", mat(LAYERS * HIDDEN * DIM)), ("rms_final", gains(DIM)),
            ("rope", [0.0] * (SEQ * hd)), ("wcls", mat(vocab * DIM))]


def write(d):
    vocab, _ = dims()
    with open(d + "/model.bin", "wb") as f:
        f.write(struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, -vocab, SEQ))
        for _, w in weights():
            f.write(struct.pack("<%df" % len(w), *w))
    ps = pieces()
    with open(d + "/tokenizer.bin", "wb") as f:
        f.write(struct.pack("<i", max(len(t.encode()) for t, _ in ps)))
        for t, s in ps:
            b = t.encode()
            f.write(struct.pack("<fi", s, len(b)) + b)


def encode(text):
    """run.c's encode(): BOS, the dummy prefix " ", code points or their bytes
    + 3, then the best-scoring adjacent merge until none is left."""
    ps = pieces()
    ids = {t: i for i, (t, _) in enumerate(ps)}
    toks = [1]
    if text:
        toks.append(ids[" "])
    for c in text:
        if c in ids:
            toks.append(ids[c])
        else:
            toks += [b + 3 for b in c.encode()]
    while True:
        best, at = -1e10, -1
        for i in range(len(toks) - 1):
            j = ids.get(ps[toks[i]][0] + ps[toks[i + 1]][0])
            if j is not None and ps[j][1] > best:
                best, at, bid = ps[j][1], i, j
        if at < 0:
            return toks
        toks[at:at + 2] = [bid]


def rmsnorm(x, g):
    inv = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + 1e-5)
    return [v * inv * w for v, w in zip(x, g)]


def matvec(w, off, rows, cols, x):
    return [sum(w[off + r * cols + c] * x[c] for c in range(cols)) for r in range(rows)]


def forward(ids):
    vocab, hd = dims()
    W = dict(weights())
    kv = KV_HEADS * hd
    keys = [[] for _ in range(LAYERS)]
    vals = [[] for _ in range(LAYERS)]
    out = []
    for pos, tok in enumerate(ids):
        x = W["embed"][tok * DIM:(tok + 1) * DIM]
        for l in range(LAYERS):
            xb = rmsnorm(x, W["rms_att"][l * DIM:(l + 1) * DIM])
            q = matvec(W["wq"], l * DIM * DIM, DIM, DIM, xb)
            k = matvec(W["wk"], l * kv * DIM, kv, DIM, xb)
            v = matvec(W["wv"], l * kv * DIM, kv, DIM, xb)
            for i in range(0, DIM, 2):  # run.c: adjacent pairs, frequency by position in the head
                a = pos * (1.0 / 10000.0 ** ((i % hd) / hd))
                cs, sn = math.cos(a), math.sin(a)
                for vec in ((q, k) if i < kv else (q,)):
                    v0, v1 = vec[i], vec[i + 1]
                    vec[i], vec[i + 1] = v0 * cs - v1 * sn, v0 * sn + v1 * cs
            keys[l].append(k)
            vals[l].append(v)
            att = []
            for h in range(HEADS):
                g = h // (HEADS // KV_HEADS)
                qh = q[h * hd:(h + 1) * hd]
                sc = [sum(a * b for a, b in zip(qh, kk[g * hd:(g + 1) * hd])) / math.sqrt(hd) for kk in keys[l]]
                mx = max(sc)
                e = [math.exp(s - mx) for s in sc]
                z = sum(e)
                att += [sum(e[t] / z * vals[l][t][g * hd + j] for t in range(len(e))) for j in range(hd)]
            x = [a + b for a, b in zip(x, matvec(W["wo"], l * DIM * DIM, DIM, DIM, att))]
            xb = rmsnorm(x, W["rms_ffn"][l * DIM:(l + 1) * DIM])
            h1 = matvec(W["w1"], l * HIDDEN * DIM, HIDDEN, DIM, xb)
            h3 = matvec(W["w3"], l * HIDDEN * DIM, HIDDEN, DIM, xb)
            hb = [a / (1.0 + math.exp(-a)) * b for a, b in zip(h1, h3)]
            x = [a + b for a, b in zip(x, matvec(W["w2"], l * DIM * HIDDEN, DIM, HIDDEN, hb))]
        x = rmsnorm(x, W["rms_final"])
        out.append(matvec(W["wcls"], 0, vocab, DIM, x))
    return out


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "write" and len(sys.argv) == 3:
        write(sys.argv[2])
    elif cmd == "encode" and len(sys.argv) == 4:
        print(json.dumps(encode(sys.argv[3])))
    elif cmd == "logits" and len(sys.argv) == 5:
        rows = forward([int(t) for t in sys.argv[3].split(",")])
        with open(sys.argv[4], "wb") as f:
            for r in rows:
                f.write(struct.pack("<%df" % len(r), *r))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
