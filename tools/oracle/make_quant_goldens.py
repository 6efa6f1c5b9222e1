#!/usr/bin/env python3
"""Makes MLX-layout quantized checkpoints of small random Llama models, with
reference logits computed in float64 by transformers from their dequantized
weights.

  <out>/<name>/src/            the bf16 checkpoint the quantization started from
  <out>/<name>/recipe.json     the per-module bits/group sizes used (ember recipe)
  <out>/<name>/quant/          config.json (quantization block) + model.safetensors
  <out>/<name>/quant/ref.json  {"ids": [...], "greedy": [...], "n_new": N}
  <out>/<name>/quant/logits.bin float32 [len(ids), vocab]

Quantization follows MLX's affine round-to-nearest exactly (f32 arithmetic,
ties to even; the group end of larger magnitude kept exact), and packs each row
as a little-endian bitstream of `bits`-bit values in u32 words. Written from
the layout's description, independently of ember's C quantizer, which the
tests compare byte for byte.

Run on a machine with torch + transformers:  python3 make_quant_goldens.py OUT
"""
import json, os, shutil, struct, sys
import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

SEQ_LEN, N_NEW = 24, 12

VARIANTS = [
    ("mixed_untied", dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=320, tie_word_embeddings=False),
     (4, 64), {
         "model.embed_tokens": (6, 64), "lm_head": (8, 32),
         "model.layers.0.self_attn.q_proj": (4, 64), "model.layers.0.self_attn.k_proj": (3, 32),
         "model.layers.0.self_attn.v_proj": (5, 128), "model.layers.0.self_attn.o_proj": (2, 64),
         "model.layers.0.mlp.gate_proj": (6, 32), "model.layers.0.mlp.up_proj": (4, 128),
         "model.layers.0.mlp.down_proj": (3, 64), "model.layers.1.mlp.down_proj": None,
     }),
    ("tied_3bit", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=64, vocab_size=256, tie_word_embeddings=True),
     (3, 32), {"model.embed_tokens": (5, 128), "model.layers.1.self_attn.o_proj": (8, 64),
               "model.layers.1.mlp.up_proj": (2, 32)}),
]


def mlx_quantize(w, bits, group):
    """w: float32 [R, C] -> (q int64 [R, C], scales f32 [R, G], biases f32 [R, G])."""
    R, C = w.shape
    wg = w.reshape(R, C // group, group)
    n_bins = torch.tensor(float(2 ** bits - 1), dtype=torch.float32)
    w_max, w_min = wg.max(-1).values, wg.min(-1).values
    mask = w_min.abs() > w_max.abs()
    scale = torch.clamp((w_max - w_min) / n_bins, min=torch.tensor(1e-7, dtype=torch.float32))
    scale = torch.where(mask, scale, -scale)
    edge = torch.where(mask, w_min, w_max)
    q0 = torch.round(edge / scale)
    nz = q0 != 0
    scale = torch.where(nz, edge / torch.where(nz, q0, torch.ones_like(q0)), scale)
    bias = torch.where(nz, edge, torch.zeros_like(edge))
    q = torch.round((wg - bias[..., None]) / scale[..., None])
    q = torch.minimum(torch.maximum(q, torch.zeros_like(q)), n_bins)
    return q.reshape(R, C).to(torch.int64), scale, bias


def pack_rows(q, bits):
    """Each row a little-endian bitstream: value k at bits [k*bits, (k+1)*bits)."""
    q = q.numpy().astype(np.uint64)
    R, C = q.shape
    bitarr = ((q[:, :, None] >> np.arange(bits, dtype=np.uint64)) & 1).astype(np.uint8).reshape(R, C * bits)
    by = np.packbits(bitarr, axis=1, bitorder="little")
    return by.reshape(R, -1).view("<u4")


def bf16_bytes(t):
    return t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()


def write_safetensors(path, items):
    header, off, blobs = {}, 0, []
    for name, dtype, shape, data in items:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "mlx"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for b in blobs:
            f.write(b)


def build(out, i, name, over, default, modules):
    torch.manual_seed(300 + i)
    kw = dict(over, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              pad_token_id=None)
    cfg = AutoConfig.for_model("llama", **kw)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.08)
            elif "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    model = model.to(torch.bfloat16)
    d = os.path.join(out, name)
    src = os.path.join(d, "src")
    model.save_pretrained(src, safe_serialization=True)
    sd = {k: v for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    items, deq, qblock = [], {}, {"group_size": default[1], "bits": default[0], "mode": "affine"}
    recipe = {"bits": default[0], "group_size": default[1], "rules": []}
    for k, v in sd.items():
        module = k[:-len(".weight")] if k.endswith(".weight") else None
        linear = module is not None and v.dim() == 2
        choice = modules.get(module, default) if linear else None
        if module in modules:
            qblock[module] = False if choice is None else {"group_size": choice[1], "bits": choice[0]}
            recipe["rules"].append({"match": module, "quantize": False} if choice is None else
                                   {"match": module, "bits": choice[0], "group_size": choice[1]})
        if choice is None:
            items.append((k, "BF16", v.shape, bf16_bytes(v)))
            deq[k] = v.to(torch.float64)
            continue
        bits, group = choice
        q, s, b = mlx_quantize(v.to(torch.float32), bits, group)
        s16, b16 = s.to(torch.bfloat16), b.to(torch.bfloat16)
        packed = pack_rows(q, bits)
        items.append((k, "U32", packed.shape, packed.tobytes()))
        items.append((module + ".scales", "BF16", s16.shape, bf16_bytes(s16)))
        items.append((module + ".biases", "BF16", b16.shape, bf16_bytes(b16)))
        R, C = v.shape
        w = (s16.to(torch.float64)[..., None] * q.reshape(R, C // group, group).to(torch.float64)
             + b16.to(torch.float64)[..., None]).reshape(R, C)
        deq[k] = w
    qd = os.path.join(d, "quant")
    os.makedirs(qd, exist_ok=True)
    write_safetensors(os.path.join(qd, "model.safetensors"), items)
    conf = json.load(open(os.path.join(src, "config.json")))
    conf["quantization"] = qblock
    conf["quantization_config"] = qblock
    json.dump(conf, open(os.path.join(qd, "config.json"), "w"), indent=2)
    shutil.copy(os.path.join(src, "generation_config.json"), qd)
    json.dump(recipe, open(os.path.join(d, "recipe.json"), "w"), indent=2)
    # Loaded as a user loads the source (f32 rotary tables, as the dense
    # goldens), then the weights replaced by the dequantized ones in f64.
    ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64).eval()
    full = dict(deq)
    if cfg.tie_word_embeddings:
        full["lm_head.weight"] = deq["model.embed_tokens.weight"]
    missing, unexpected = ref.load_state_dict(full, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    g = torch.Generator().manual_seed(11 + i)
    ids = torch.randint(3, cfg.vocab_size, (1, SEQ_LEN), generator=g)
    with torch.no_grad():
        logits = ref(ids).logits[0].to(torch.float32).numpy()
        seq = ids
        for _ in range(N_NEW):
            nxt = ref(seq).logits[0, -1].argmax().view(1, 1)
            seq = torch.cat([seq, nxt], dim=1)
    logits.astype("<f4").tofile(os.path.join(qd, "logits.bin"))
    json.dump({"ids": ids[0].tolist(), "greedy": seq[0, SEQ_LEN:].tolist(), "n_new": N_NEW,
               "transformers": transformers.__version__, "torch": torch.__version__},
              open(os.path.join(qd, "ref.json"), "w"))
    print(name, "ok", logits.shape, flush=True)


def main(out):
    os.makedirs(out, exist_ok=True)
    for i, (name, over, default, modules) in enumerate(VARIANTS):
        build(out, i, name, over, default, modules)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "goldens")
