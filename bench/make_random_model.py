#!/usr/bin/env python3
"""Writes a random-weight checkpoint of a real architecture's shape (bf16
safetensors + config.json) for benchmarks, with the standard library only.

  python3 bench/make_random_model.py OUT [--shape llama-3.2-1b|llama-3.1-8b|tiny]

Weights are random bf16 values of magnitude ~2^-6 with random signs (no
NaN/Inf), written tensor by tensor so memory stays small.
"""
import argparse, json, os, struct

SHAPES = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                         tie_word_embeddings=True, head_dim=64, max_position_embeddings=131072,
                         rope_theta=500000.0,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=8192)),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                         tie_word_embeddings=False, head_dim=128, max_position_embeddings=131072,
                         rope_theta=500000.0,
                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=8192)),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1024, tie_word_embeddings=True, head_dim=64,
                 max_position_embeddings=4096, rope_theta=10000.0),
}

# High byte of a little-endian bf16: sign + top exponent bits. 0x3c/0xbc give
# magnitudes in [2^-7, 2^-6); low byte stays random (mantissa + exponent lsb).
HIGH = bytes((0x3c if (b & 1) else 0xbc) for b in range(256))


def random_bf16(n):
    buf = bytearray(os.urandom(2 * n))
    buf[1::2] = bytes(buf[1::2]).translate(HIGH)
    return bytes(buf)


def ones_bf16(n):
    return b"\x80\x3f" * n


def tensors(cfg):
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    yield "model.embed_tokens.weight", [cfg["vocab_size"], H], False
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [H], True
        yield p + "self_attn.q_proj.weight", [q, H], False
        yield p + "self_attn.k_proj.weight", [kv, H], False
        yield p + "self_attn.v_proj.weight", [kv, H], False
        yield p + "self_attn.o_proj.weight", [H, q], False
        yield p + "post_attention_layernorm.weight", [H], True
        yield p + "mlp.gate_proj.weight", [F, H], False
        yield p + "mlp.up_proj.weight", [F, H], False
        yield p + "mlp.down_proj.weight", [H, F], False
    yield "model.norm.weight", [H], True
    if not cfg["tie_word_embeddings"]:
        yield "lm_head.weight", [cfg["vocab_size"], H], False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.2-1b", choices=sorted(SHAPES))
    a = ap.parse_args()
    cfg = dict(SHAPES[a.shape])
    os.makedirs(a.out, exist_ok=True)
    header, off, items = {}, 0, list(tensors(cfg))
    for name, shape, _ in items:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    tmp = os.path.join(a.out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for name, shape, is_norm in items:
            n = 1
            for d in shape:
                n *= d
            step = 1 << 24
            for s in range(0, n, step):
                k = min(step, n - s)
                f.write(ones_bf16(k) if is_norm else random_bf16(k))
    os.replace(tmp, os.path.join(a.out, "model.safetensors"))
    conf = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16")
    conf.update(cfg)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
    print(a.out, a.shape, off / 1e9, "GB")


if __name__ == "__main__":
    main()
