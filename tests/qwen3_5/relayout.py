#!/usr/bin/env python3
"""Rewrites a Qwen3.5 checkpoint saved in the transformers text layout into
another layout, with the standard library only:

  relayout.py SRC DST vl        model.language_model.*, top-level lm_head,
                                a model.visual.* tensor (to be ignored), mtp.* kept
  relayout.py SRC DST mlx       language_model.model.*, language_model.lm_head,
                                conv1d [C, K, 1], norm gains shifted (+1, stored F32
                                so the shift is exact), mtp.* dropped
  relayout.py SRC DST mlx-mtp   as mlx but mtp.* kept: by the reference rule the
                                gains are then shifted again (a corrupted artifact)
  relayout.py SRC DST mlx-torchconv  as mlx but conv1d left [C, 1, K]: the same
  relayout.py SRC DST text-nomtp     text layout with mtp.* dropped and the conv
                                kernel moved to [C, K, 1]: gains stay unshifted
                                though they need it (also corrupted)
The config is rewritten to match (the VL wrapper gets text_config)."""
import json, os, struct, sys

NORM_SUFFIXES = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
                 ".q_norm.weight", ".k_norm.weight")


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    data = b[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}


def write_st(path, tensors):
    header, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for r in blobs:
            f.write(r)


def shifted_f32(dt, raw):
    if dt == "BF16":
        vals = [struct.unpack("<f", struct.pack("<I", u << 16))[0] for u in struct.unpack(f"<{len(raw) // 2}H", raw)]
    elif dt == "F32":
        vals = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    else:
        raise SystemExit(f"unexpected gain dtype {dt}")
    return struct.pack(f"<{len(vals)}f", *[v + 1.0 for v in vals])


def main(src, dst, mode):
    t = read_st(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    out = {}
    mlx = mode.startswith("mlx")
    for k, (dt, shape, raw) in t.items():
        is_mtp = k.startswith("mtp.")
        if is_mtp and mode in ("mlx", "mlx-torchconv", "text-nomtp"):
            continue
        if "conv1d.weight" in k and (mode in ("mlx", "mlx-mtp", "text-nomtp")) and shape[-1] != 1:
            shape = [shape[0], shape[2], 1]  # same bytes, kernel axis moved
        if mlx and not is_mtp and len(shape) == 1 and any(k.endswith(s) for s in NORM_SUFFIXES):
            dt, raw = "F32", shifted_f32(dt, raw)
        name = k
        if mode == "vl":
            if k.startswith("model."):
                name = "model.language_model." + k[len("model."):]
        elif mlx:
            if k.startswith("model."):
                name = "language_model.model." + k[len("model."):]
            elif k == "lm_head.weight":
                name = "language_model.lm_head.weight"
        out[name] = (dt, shape, raw)
    if mode == "vl":
        out["model.visual.patch_embed.proj.weight"] = ("BF16", [4, 3], b"\x80\x3f" * 12)
        text = dict(cfg)
        cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "text_config": text, "tie_word_embeddings": text.get("tie_word_embeddings", False),
               "vision_config": {"depth": 1, "hidden_size": 4}}
        text["model_type"] = "qwen3_5_text"
        text.pop("architectures", None)
    os.makedirs(dst, exist_ok=True)
    write_st(os.path.join(dst, "model.safetensors"), out)
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)


if __name__ == "__main__":
    main(*sys.argv[1:4])
