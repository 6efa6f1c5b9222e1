#!/usr/bin/env bash
# The Qwen3.5 rotation plan on a synthetic checkpoint with the family's
# tensor names (GDN linear_attn layer, gated full-attention layer, MTP):
# R1 only, zero-centred gains folded as (1 + g), GDN in_proj_*/out_proj and
# mtp.fc covered, the MTP head its own tensor. The folded weights are checked
# through invariants that hold exactly when the transform is right:
#   reader:  W'·(e·Q)ᵀ = W·diag(1+g)·eᵀ   (e an embedding row)
#   writer:  (E·Q)·(Qᵀ·W)·v = E·W·v
# (The family's graph is not in this tree; logits are not compared here.)
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/src" <<'PY'
import json, os, random, struct, sys
d = sys.argv[1]; os.makedirs(d)
H, V, F, hd = 64, 48, 96, 16
random.seed(5)
T = {}
def m(r, c): T[name] = ([r, c] if c else [r]); return
def add(name, shape, kind="w"):
    n = 1
    for s in shape: n *= s
    vals = [random.gauss(0, 0.1) for _ in range(n)] if kind == "w" else [random.gauss(0, 0.3) for _ in range(n)]
    T[name] = (shape, vals)
add("model.embed_tokens.weight", [V, H]); add("model.norm.weight", [H], "g"); add("lm_head.weight", [V, H])
def mlp(p):
    add(p + "mlp.gate_proj.weight", [F, H]); add(p + "mlp.up_proj.weight", [F, H]); add(p + "mlp.down_proj.weight", [H, F])
def full(p):
    add(p + "self_attn.q_proj.weight", [2 * 4 * hd, H]); add(p + "self_attn.k_proj.weight", [2 * hd, H])
    add(p + "self_attn.v_proj.weight", [2 * hd, H]); add(p + "self_attn.o_proj.weight", [H, 4 * hd])
    add(p + "self_attn.q_norm.weight", [hd], "g"); add(p + "self_attn.k_norm.weight", [hd], "g")
for i in range(2):
    p = f"model.layers.{i}."
    add(p + "input_layernorm.weight", [H], "g"); add(p + "post_attention_layernorm.weight", [H], "g")
    if i == 0:
        add(p + "linear_attn.in_proj_qkv.weight", [96, H]); add(p + "linear_attn.in_proj_z.weight", [32, H])
        add(p + "linear_attn.in_proj_b.weight", [4, H]); add(p + "linear_attn.in_proj_a.weight", [4, H])
        add(p + "linear_attn.conv1d.weight", [96, 1, 4]); add(p + "linear_attn.A_log", [4], "g")
        add(p + "linear_attn.dt_bias", [4], "g"); add(p + "linear_attn.norm.weight", [8], "g")
        add(p + "linear_attn.out_proj.weight", [H, 32])
    else:
        full(p)
    mlp(p)
add("mtp.fc.weight", [H, 2 * H]); add("mtp.pre_fc_norm_embedding.weight", [H], "g")
add("mtp.pre_fc_norm_hidden.weight", [H], "g"); add("mtp.norm.weight", [H], "g")
p = "mtp.layers.0."
add(p + "input_layernorm.weight", [H], "g"); add(p + "post_attention_layernorm.weight", [H], "g"); full(p); mlp(p)
hdr, off, blobs = {}, 0, []
for k, (shape, vals) in T.items():
    b = struct.pack(f"<{len(vals)}f", *vals); hdr[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
hj = json.dumps(hdr).encode(); hj += b" " * (-len(hj) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj); [f.write(b) for b in blobs]
json.dump({"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "hidden_size": H,
           "num_attention_heads": 4, "head_dim": hd, "num_hidden_layers": 2, "vocab_size": V,
           "tie_word_embeddings": False}, open(os.path.join(d, "config.json"), "w"))
PY
fail=0
"$EMBER_BIN" quantize "$tmp/src" --plan --rotate > "$tmp/plan.txt"
chk() { if grep -qE "$1" "$tmp/plan.txt"; then echo "ok   plan: $2"; else echo "FAIL plan: $2"; fail=1; fi; }
chk '^model.layers.0.linear_attn.in_proj_b.weight .*gain\(model.layers.0.input_layernorm.weight \+ 1\) . R1$' "GDN in_proj folded + R1"
chk '^model.layers.0.linear_attn.out_proj.weight .* R1\^T \.$' "GDN out_proj R1^T"
chk '^model.layers.0.input_layernorm.weight \[64\] <- zeros$' "zero-centred gain becomes zeros"
chk '^mtp.fc.weight .*gain\(mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight \+ 1\) . R1 R1\^T \.$' "MTP fc"
chk '^mtp.lm_head.weight \[48, 64\] <- lm_head.weight \* gain\(mtp.norm.weight \+ 1\) . R1$' "MTP head"
chk '^model.layers.0.linear_attn.conv1d.weight .*<- model.layers.0.linear_attn.conv1d.weight$' "conv1d untouched"
if grep -q "R2" "$tmp/plan.txt"; then echo "FAIL plan: R2 used on Qwen3.5"; fail=1; else echo "ok   plan: no R2"; fi
"$EMBER_BIN" quantize "$tmp/src" "$tmp/rot" --rotate --seed 3 --bits none 2>/dev/null
python3 - "$tmp/src" "$tmp/rot" <<'PY' || fail=1
import json, struct, sys
def load(d):
    f = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]; f.seek(base + a); raw = f.read(b - a)
        vals = struct.unpack(f"<{len(raw)//4}f", raw); s = v["shape"]
        out[k] = [list(vals[i*s[1]:(i+1)*s[1]]) for i in range(s[0])] if len(s) == 2 else list(vals)
    return out, h.get("__metadata__", {})
A, _ = load(sys.argv[1]); B, meta = load(sys.argv[2])
dot = lambda u, v: sum(x * y for x, y in zip(u, v))
mv = lambda M, v: [dot(r, v) for r in M]
worst = 0
e, e2 = A["model.embed_tokens.weight"][5], B["model.embed_tokens.weight"][5]
def reader(name, gname, seg=None):
    global worst
    g = [1 + x for x in A[gname]]
    W, W2 = A[name], B[name]
    for r in range(len(W)):
        want = dot([w * gg for w, gg in zip(W[r], g)], e); got = dot(W2[r], e2)
        worst = max(worst, abs(want - got))
reader("model.layers.0.linear_attn.in_proj_qkv.weight", "model.layers.0.input_layernorm.weight")
reader("model.layers.0.linear_attn.in_proj_a.weight", "model.layers.0.input_layernorm.weight")
reader("model.layers.1.self_attn.q_proj.weight", "model.layers.1.input_layernorm.weight")
reader("model.layers.1.mlp.up_proj.weight", "model.layers.1.post_attention_layernorm.weight")
reader("lm_head.weight", "model.norm.weight")
reader("mtp.layers.0.self_attn.k_proj.weight", "mtp.layers.0.input_layernorm.weight")
g = [1 + x for x in A["mtp.norm.weight"]]
for r in range(len(A["lm_head.weight"])):  # MTP head: lm_head with mtp.norm folded
    worst = max(worst, abs(dot([w * gg for w, gg in zip(A["lm_head.weight"][r], g)], e) - dot(B["mtp.lm_head.weight"][r], e2)))
def writer(name):
    global worst
    W, W2 = A[name], B[name]
    v = [((i * 7) % 5 - 2) * 0.3 for i in range(len(W[0]))]
    y, y2 = mv(W, v), mv(W2, v)
    worst = max(worst, abs(dot(e, y) - dot(e2, y2)))
writer("model.layers.0.linear_attn.out_proj.weight"); writer("model.layers.1.self_attn.o_proj.weight")
writer("model.layers.0.mlp.down_proj.weight")
# mtp.fc reads [norm_e(e); norm_h(h)] and writes the MTP stream: e·fc·diag(1+g)·[a; b]
ga = [1 + x for x in A["mtp.pre_fc_norm_embedding.weight"]] + [1 + x for x in A["mtp.pre_fc_norm_hidden.weight"]]
a, a2 = A["model.embed_tokens.weight"][7] + A["model.embed_tokens.weight"][9], B["model.embed_tokens.weight"][7] + B["model.embed_tokens.weight"][9]
y = mv([[w * gg for w, gg in zip(r, ga)] for r in A["mtp.fc.weight"]], a); y2 = mv(B["mtp.fc.weight"], a2)
worst = max(worst, abs(dot(e, y) - dot(e2, y2)))
zeros = all(x == 0 for x in B["model.layers.1.post_attention_layernorm.weight"] + B["mtp.norm.weight"])
ok = worst < 1e-5 and zeros and meta["ember.family"] == "qwen3_5" and B["model.layers.0.linear_attn.A_log"] == A["model.layers.0.linear_attn.A_log"]
print(("ok  " if ok else "FAIL") + f" folded invariants hold (worst {worst:.2e}), gains zeroed, GDN state params untouched")
sys.exit(0 if ok else 1)
PY
exit $fail
