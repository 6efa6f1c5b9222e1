#!/usr/bin/env python3
"""Writes a tiny Qwen3 checkpoint around a real tokenizer, for server tests.

  make_chat_checkpoint.py OUT TOKENIZER_DIR CHAIN

CHAIN is a comma-separated list of token ids t0,t1,...,tn. The weights make
the model a bigram machine: attention and MLP outputs are zero (o_proj and
down_proj are zero), so the logits depend only on the current token, and
each t_i is given its own embedding direction whose lm_head row for t_{i+1}
is large. After t0 the greedy reply is therefore exactly t1..tn (a scripted
reply, e.g. a tool call ending in <|im_end|>); after any other token the
reply is random text. Stdlib only; weights are bf16.
"""
import json, os, random, shutil, struct, sys

HIDDEN, INTER, HEADS, KV, HEAD_DIM, LAYERS = 64, 64, 2, 1, 32, 1


def rand_bf16(count, rng):
    # bf16 little-endian: byte0 = low exponent bit + mantissa (random), byte1 =
    # sign + high exponent bits 60/61 (magnitudes 2^-7 .. 2^-5).
    lo = rng.randbytes(count)
    hi = rng.randbytes(count).translate(bytes(((b & 0x80) | (60 + (b & 1))) for b in range(256)))
    out = bytearray(2 * count)
    out[0::2] = lo
    out[1::2] = hi
    return out


def const_bf16(count, value):
    return struct.pack("<H", struct.unpack("<I", struct.pack("<f", value))[0] >> 16) * count


def bf16(value):
    return struct.pack("<H", struct.unpack("<I", struct.pack("<f", value))[0] >> 16)


def main():
    out, tokdir, chain = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    if len(chain) - 1 > HIDDEN:
        sys.exit("chain too long for the hidden size")
    tok = json.load(open(os.path.join(tokdir, "tokenizer.json")))
    vocab = max([tok["model"]["vocab"][k] for k in tok["model"]["vocab"]] + [t["id"] for t in tok["added_tokens"]]) + 1
    rng = random.Random(1234)
    tensors = []  # (name, shape, bytes)
    embed = rand_bf16(vocab * HIDDEN, rng)
    head = rand_bf16(vocab * HIDDEN, rng)
    # Other tokens carry nothing in the chain's directions, so only t_i
    # selects t_{i+1}.
    for i in range(len(chain)):
        for b in (0, 1):
            embed[2 * i + b::2 * HIDDEN] = bytes(vocab)
    for i, t in enumerate(chain):
        row = bytearray(const_bf16(HIDDEN, 0.0))
        row[2 * i:2 * i + 2] = bf16(1.0)
        embed[2 * HIDDEN * t:2 * HIDDEN * (t + 1)] = row
        if i + 1 < len(chain):
            nxt = chain[i + 1]
            head[2 * (HIDDEN * nxt + i):2 * (HIDDEN * nxt + i) + 2] = bf16(4.0)
    tensors.append(("model.embed_tokens.weight", [vocab, HIDDEN], embed))
    tensors.append(("lm_head.weight", [vocab, HIDDEN], head))
    tensors.append(("model.norm.weight", [HIDDEN], const_bf16(HIDDEN, 1.0)))
    for l in range(LAYERS):
        p = "model.layers.%d." % l
        tensors += [
            (p + "input_layernorm.weight", [HIDDEN], const_bf16(HIDDEN, 1.0)),
            (p + "post_attention_layernorm.weight", [HIDDEN], const_bf16(HIDDEN, 1.0)),
            (p + "self_attn.q_proj.weight", [HEADS * HEAD_DIM, HIDDEN], rand_bf16(HEADS * HEAD_DIM * HIDDEN, rng)),
            (p + "self_attn.k_proj.weight", [KV * HEAD_DIM, HIDDEN], rand_bf16(KV * HEAD_DIM * HIDDEN, rng)),
            (p + "self_attn.v_proj.weight", [KV * HEAD_DIM, HIDDEN], rand_bf16(KV * HEAD_DIM * HIDDEN, rng)),
            (p + "self_attn.o_proj.weight", [HIDDEN, HEADS * HEAD_DIM], const_bf16(HIDDEN * HEADS * HEAD_DIM, 0.0)),
            (p + "self_attn.q_norm.weight", [HEAD_DIM], const_bf16(HEAD_DIM, 1.0)),
            (p + "self_attn.k_norm.weight", [HEAD_DIM], const_bf16(HEAD_DIM, 1.0)),
            (p + "mlp.gate_proj.weight", [INTER, HIDDEN], rand_bf16(INTER * HIDDEN, rng)),
            (p + "mlp.up_proj.weight", [INTER, HIDDEN], rand_bf16(INTER * HIDDEN, rng)),
            (p + "mlp.down_proj.weight", [HIDDEN, INTER], const_bf16(HIDDEN * INTER, 0.0)),
        ]
    header, offset = {}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors.part"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, _, data in tensors:
            f.write(data)
    os.replace(os.path.join(out, "model.safetensors.part"), os.path.join(out, "model.safetensors"))
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
              "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV, "head_dim": HEAD_DIM, "vocab_size": vocab, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu",
              "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump({"eos_token_id": [151645, 151643], "temperature": 1.0, "top_p": 1.0},
              open(os.path.join(out, "generation_config.json"), "w"))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, f), os.path.join(out, f))


if __name__ == "__main__":
    main()
