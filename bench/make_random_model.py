#!/usr/bin/env python3
"""Writes a random-weight checkpoint of a real architecture's shape (bf16
safetensors + config.json) for benchmarks, with the standard library only.

  python3 bench/make_random_model.py OUT [--shape llama-3.2-1b|llama-3.1-8b|qwen3.5-4b|qwen3.5-small|tiny|micro]
                                        [--vocab DIR] [--layers N]

--vocab DIR copies DIR's tokenizer.json (and tokenizer_config.json) into OUT
and sizes the embedding to that vocabulary, with its EOS as eos_token_id,
so the model speaks real token ids (e.g. for constrained-decoding tests).

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
    # Qwen3.5-4B's published text shape: 32 layers, a full-attention layer every
    # 4th (gated, head_dim 256, partial rotary 0.25), Gated DeltaNet elsewhere
    # (16 key / 32 value heads of 128), tied embeddings, one MTP layer.
    "qwen3.5-4b": dict(model_type="qwen3_5_text", hidden_size=2560, intermediate_size=9216,
                       num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4, head_dim=256,
                       vocab_size=248320, tie_word_embeddings=True, max_position_embeddings=262144,
                       linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                       linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4,
                       mtp_num_hidden_layers=1,
                       rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                                            mrope_section=[11, 11, 10], mrope_interleaved=True)),
    # A small hybrid of Qwen3.5's layout (3 Gated DeltaNet layers per attention layer) that
    # prefills a few thousand tokens on a CPU in seconds: prefix-cache measurements.
    "qwen3.5-small": dict(model_type="qwen3_5_text", hidden_size=512, intermediate_size=1536,
                          num_hidden_layers=16, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                          vocab_size=4096, tie_word_embeddings=True, max_position_embeddings=8192,
                          linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
                          linear_value_head_dim=64, linear_conv_kernel_dim=4, full_attention_interval=4,
                          bos_token_id=1, eos_token_id=2,
                          rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25)),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1024, tie_word_embeddings=True, head_dim=64,
                 max_position_embeddings=4096, rope_theta=10000.0),
    "micro": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, vocab_size=1024, tie_word_embeddings=True, head_dim=16,
                  max_position_embeddings=4096, rope_theta=10000.0),
}


def adopt_vocab(cfg, conf, src, out):
    """Copies the tokenizer files and sizes the model to its vocabulary."""
    import shutil
    tok = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
    ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok.get("added_tokens", [])]
    cfg["vocab_size"] = max(ids) + 1
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    tc_path = os.path.join(src, "tokenizer_config.json")
    eos = json.load(open(tc_path, encoding="utf-8")).get("eos_token") if os.path.exists(tc_path) else None
    eos = eos.get("content") if isinstance(eos, dict) else eos
    by_content = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    if eos in by_content:
        conf["eos_token_id"] = by_content[eos]
        conf["bos_token_id"] = by_content[eos]

# High byte of a little-endian bf16: sign + top exponent bits. 0x3c/0xbc give
# magnitudes in [2^-7, 2^-6); low byte stays random (mantissa + exponent lsb).
HIGH = bytes((0x3c if (b & 1) else 0xbc) for b in range(256))


def random_bf16(n):
    buf = bytearray(os.urandom(2 * n))
    buf[1::2] = bytes(buf[1::2]).translate(HIGH)
    return bytes(buf)


# Large checkpoints draw their chunks from one random pool at random even
# offsets: an 8B shape is written at disk speed instead of os.urandom's.
POOL_VALUES = 1 << 25
_pool = []


def pooled_bf16(n):
    if n > POOL_VALUES // 2:
        return random_bf16(n)
    if not _pool:
        _pool.append(random_bf16(POOL_VALUES))
    off = 2 * (int.from_bytes(os.urandom(4), "little") % (POOL_VALUES - n))
    return _pool[0][off:off + 2 * n]


def ones_bf16(n):
    return b"\x80\x3f" * n


def zeros_bf16(n):
    return b"\x00\x00" * n


def qwen3_5_tensors(cfg):
    """(name, shape, fill): fill is "rand", "one" (plain gain) or "zero"
    (zero-centred gain: the graph multiplies by 1 + stored)."""
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    C, vd = 2 * hk * dk + hv * dv, hv * dv

    def attn(p):
        yield p + "self_attn.q_proj.weight", [2 * nh * hd, H], "rand"
        yield p + "self_attn.k_proj.weight", [nkv * hd, H], "rand"
        yield p + "self_attn.v_proj.weight", [nkv * hd, H], "rand"
        yield p + "self_attn.o_proj.weight", [H, nh * hd], "rand"
        yield p + "self_attn.q_norm.weight", [hd], "zero"
        yield p + "self_attn.k_norm.weight", [hd], "zero"

    def common(p):
        yield p + "input_layernorm.weight", [H], "zero"
        yield p + "post_attention_layernorm.weight", [H], "zero"
        yield p + "mlp.gate_proj.weight", [F, H], "rand"
        yield p + "mlp.up_proj.weight", [F, H], "rand"
        yield p + "mlp.down_proj.weight", [H, F], "rand"

    yield "model.embed_tokens.weight", [cfg["vocab_size"], H], "rand"
    interval = cfg["full_attention_interval"]
    for i in range(L):
        p = f"model.layers.{i}."
        yield from common(p)
        if (i + 1) % interval:
            a = p + "linear_attn."
            yield a + "in_proj_qkv.weight", [C, H], "rand"
            yield a + "in_proj_z.weight", [vd, H], "rand"
            yield a + "in_proj_b.weight", [hv, H], "rand"
            yield a + "in_proj_a.weight", [hv, H], "rand"
            yield a + "conv1d.weight", [C, 1, K], "rand"
            yield a + "A_log", [hv], "rand"
            yield a + "dt_bias", [hv], "rand"
            yield a + "norm.weight", [dv], "one"
            yield a + "out_proj.weight", [H, vd], "rand"
        else:
            yield from attn(p)
    yield "model.norm.weight", [H], "zero"
    if not cfg["tie_word_embeddings"]:
        yield "lm_head.weight", [cfg["vocab_size"], H], "rand"
    for j in range(cfg.get("mtp_num_hidden_layers", 0)):
        p = f"mtp.layers.{j}."
        yield from common(p)
        yield from attn(p)
    if cfg.get("mtp_num_hidden_layers", 0):
        yield "mtp.fc.weight", [H, 2 * H], "rand"
        for n in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"):
            yield n, [H], "zero"


def tensors(cfg):
    if cfg.get("model_type") == "qwen3_5_text":
        yield from qwen3_5_tensors(cfg)
        return
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    yield "model.embed_tokens.weight", [cfg["vocab_size"], H], "rand"
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [H], "one"
        yield p + "self_attn.q_proj.weight", [q, H], "rand"
        yield p + "self_attn.k_proj.weight", [kv, H], "rand"
        yield p + "self_attn.v_proj.weight", [kv, H], "rand"
        yield p + "self_attn.o_proj.weight", [H, q], "rand"
        yield p + "post_attention_layernorm.weight", [H], "one"
        yield p + "mlp.gate_proj.weight", [F, H], "rand"
        yield p + "mlp.up_proj.weight", [F, H], "rand"
        yield p + "mlp.down_proj.weight", [H, F], "rand"
    yield "model.norm.weight", [H], "one"
    if not cfg["tie_word_embeddings"]:
        yield "lm_head.weight", [cfg["vocab_size"], H], "rand"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.2-1b", choices=sorted(SHAPES))
    ap.add_argument("--vocab", help="tokenizer directory whose vocabulary the model uses")
    ap.add_argument("--layers", type=int, help="fewer layers than the shape has (kernel studies)")
    a = ap.parse_args()
    cfg = dict(SHAPES[a.shape])
    if a.layers:
        cfg["num_hidden_layers"] = a.layers
    os.makedirs(a.out, exist_ok=True)
    ids_conf = {}
    if a.vocab:
        adopt_vocab(cfg, ids_conf, a.vocab, a.out)
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
        for name, shape, fill in items:
            n = 1
            for d in shape:
                n *= d
            step = 1 << 24
            for s in range(0, n, step):
                k = min(step, n - s)
                f.write(ones_bf16(k) if fill == "one" else zeros_bf16(k) if fill == "zero" else pooled_bf16(k))
    os.replace(tmp, os.path.join(a.out, "model.safetensors"))
    if cfg.get("model_type") == "qwen3_5_text":
        conf = dict(architectures=["Qwen3_5ForCausalLM"], hidden_act="silu", rms_norm_eps=1e-6,
                    bos_token_id=248044, eos_token_id=248044, dtype="bfloat16")
    else:
        conf = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                    rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16")
    conf.update(cfg)
    conf.update(ids_conf)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
    print(a.out, a.shape, off / 1e9, "GB")


if __name__ == "__main__":
    main()
