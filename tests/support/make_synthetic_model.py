#!/usr/bin/env python3
"""Writes a Llama-shaped checkpoint of a given size with constant weights
(config.json + model.safetensors), for memory tests where only the layout
matters. usage: make_synthetic_model.py DIR hidden heads kv_heads head_dim
inter layers vocab dtype(F32|BF16) tied(0|1) max_pos"""
import json
import os
import struct
import sys

d, H, nh, nkv, hd, F, L, V, dtype, tied, max_pos = sys.argv[1:12]
H, nh, nkv, hd, F, L, V, tied, max_pos = map(int, (H, nh, nkv, hd, F, L, V, tied, max_pos))
os.makedirs(d, exist_ok=True)
size = {"F32": 4, "BF16": 2}[dtype]
one = {"F32": struct.pack("<f", 0.01), "BF16": b"\x24\x3c"}[dtype]
tensors = [("model.embed_tokens.weight", [V, H]), ("model.norm.weight", [H])]
if not tied:
    tensors.append(("lm_head.weight", [V, H]))
for i in range(L):
    p = f"model.layers.{i}."
    tensors += [(p + "self_attn.q_proj.weight", [nh * hd, H]), (p + "self_attn.k_proj.weight", [nkv * hd, H]),
                (p + "self_attn.v_proj.weight", [nkv * hd, H]), (p + "self_attn.o_proj.weight", [H, nh * hd]),
                (p + "mlp.gate_proj.weight", [F, H]), (p + "mlp.up_proj.weight", [F, H]),
                (p + "mlp.down_proj.weight", [H, F]), (p + "input_layernorm.weight", [H]),
                (p + "post_attention_layernorm.weight", [H])]
header, off = {}, 0
for name, shape in tensors:
    n = size
    for s in shape:
        n *= s
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
    off += n
h = json.dumps(header).encode()
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    chunk = one * (1 << 18)
    left = off
    while left:
        w = min(left, len(chunk))
        f.write(chunk[:w])
        left -= w
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "num_attention_heads": nh,
       "num_key_value_heads": nkv, "head_dim": hd, "intermediate_size": F, "num_hidden_layers": L,
       "vocab_size": V, "max_position_embeddings": max_pos, "rms_norm_eps": 1e-5, "tie_word_embeddings": bool(tied),
       "hidden_act": "silu", "torch_dtype": dtype.lower()}
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump(cfg, f)
