#!/usr/bin/env python3
"""convert.py — a llama2.c checkpoint (model.bin) as a Hugging Face Llama snapshot.

Usage: convert.py MODEL_BIN TOKENIZER_BIN OUT_DIR

llama2.c's "version 0" export is seven little-endian int32 (dim, hidden_dim,
n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means
an untied classifier follows) and then every weight as float32, grouped by kind
across layers: embedding, attention norms, wq, wk, wv, wo, MLP norms, w1 (gate),
w2 (down), w3 (up), final norm, the RoPE tables (skipped), the classifier.
Matrices are stored [out, in], as torch.nn.Linear keeps them.

Two things change on the way to the transformers layout:
  * RoPE: llama2.c rotates adjacent pairs (2i, 2i+1) of each head; transformers
    rotates (i, i + head_dim/2). The rows of wq and wk are permuted so that the
    same model results, as Meta-to-HF conversion does.
  * names: model.layers.N.{self_attn,mlp}.*, tied embeddings kept tied.

TOKENIZER_BIN is llama2.c's tokenizer.bin: an int32 longest-piece length, then
per token a float32 score, an int32 byte length and the piece, with spaces for
sentencepiece's U+2581, bytes 3..258 as raw bytes and the specials as
"<unk>", "\n<s>\n", "\n</s>\n". It becomes a tokenizer.json of the shape
transformers gives sentencepiece BPE models (byte fallback; merges of every pair
of pieces whose join is a piece, ranked by the joined piece's score, which is the
merge order of sentencepiece and of llama2.c's encoder).

Writes OUT_DIR/config.json, model.safetensors (float32), tokenizer.json,
tokenizer_config.json and generation_config.json.
Every size is checked against the file length before anything is read. Python's
standard library only.
"""
import array
import json
import math
import os
import struct
import sys

HEADER = struct.Struct("<7i")


def fail(msg):
    sys.exit("convert.py: " + msg)


def read_header(raw, path):
    if len(raw) < HEADER.size:
        fail("%s: %d bytes, shorter than the 28-byte header" % (path, len(raw)))
    dim, hidden, layers, heads, kv_heads, vocab, seq = HEADER.unpack_from(raw)
    tied = vocab > 0
    vocab = abs(vocab)
    for name, v in (("dim", dim), ("hidden_dim", hidden), ("n_layers", layers), ("n_heads", heads),
                    ("n_kv_heads", kv_heads), ("vocab_size", vocab), ("seq_len", seq)):
        if not 0 < v < (1 << 20):
            fail("%s: header field %s = %d is out of range" % (path, name, v))
    if dim % heads or heads % kv_heads or (dim // heads) % 2:
        fail("%s: dim %d, n_heads %d, n_kv_heads %d do not divide into even heads" % (path, dim, heads, kv_heads))
    return dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab,
                seq=seq, tied=tied, head_dim=dim // heads)


def layout(h):
    """(name, shape) of every float32 block after the header, in file order."""
    d, f, n, kv = h["dim"], h["hidden"], h["layers"], h["kv_heads"] * h["head_dim"]
    blocks = [("embed", (h["vocab"], d)), ("rms_att", (n, d)), ("wq", (n, d, d)), ("wk", (n, kv, d)),
              ("wv", (n, kv, d)), ("wo", (n, d, d)), ("rms_ffn", (n, d)), ("w1", (n, f, d)),
              ("w2", (n, d, f)), ("w3", (n, f, d)), ("rms_final", (d,)),
              ("rope", (h["seq"] * h["head_dim"],))]  # freq_cis_real and _imag, unused
    if not h["tied"]:
        blocks.append(("wcls", (h["vocab"], d)))
    return blocks


class Block:
    """A float32 block of the file: raw little-endian bytes and a shape."""

    def __init__(self, data, shape):
        self.data, self.shape = data, shape

    def rows(self):
        return self.shape[-2] if len(self.shape) > 1 else 1

    def layer(self, i):
        n = len(self.data) // self.shape[0]
        return Block(self.data[i * n:(i + 1) * n], self.shape[1:])


def read_blocks(raw, h, path):
    blocks, off = {}, HEADER.size
    for name, shape in layout(h):
        end = off + 4 * math.prod(shape)
        if end > len(raw):
            fail("%s: %s needs bytes %d..%d, the file has %d" % (path, name, off, end, len(raw)))
        blocks[name] = Block(raw[off:end], shape)
        off = end
    if off != len(raw):
        fail("%s: %d bytes left over after the weights (not a version-0 llama2.c export?)" % (path, len(raw) - off))
    values = array.array("f", raw[HEADER.size:])
    if sys.byteorder != "little":
        values.byteswap()
    if not all(map(math.isfinite, values)):
        fail("%s: non-finite weights" % path)
    return blocks


def unpair_rope(w, n_heads):
    """Rows of a q/k projection from adjacent-pair rotation to half-split rotation:
    output row (head, half, k) is input row (head, 2k + half)."""
    rows, cols = w.shape
    hd, rb = rows // n_heads, 4 * cols
    out = []
    for head in range(n_heads):
        for half in range(2):
            for k in range(hd // 2):
                r = head * hd + 2 * k + half
                out.append(w.data[r * rb:(r + 1) * rb])
    return Block(b"".join(out), w.shape)


def hf_tensors(b, h):
    t = {"model.embed_tokens.weight": b["embed"], "model.norm.weight": b["rms_final"]}
    for i in range(h["layers"]):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = b["rms_att"].layer(i)
        t[p + "post_attention_layernorm.weight"] = b["rms_ffn"].layer(i)
        t[p + "self_attn.q_proj.weight"] = unpair_rope(b["wq"].layer(i), h["heads"])
        t[p + "self_attn.k_proj.weight"] = unpair_rope(b["wk"].layer(i), h["kv_heads"])
        t[p + "self_attn.v_proj.weight"] = b["wv"].layer(i)
        t[p + "self_attn.o_proj.weight"] = b["wo"].layer(i)
        t[p + "mlp.gate_proj.weight"] = b["w1"].layer(i)
        t[p + "mlp.down_proj.weight"] = b["w2"].layer(i)
        t[p + "mlp.up_proj.weight"] = b["w3"].layer(i)
    if not h["tied"]:
        t["lm_head.weight"] = b["wcls"]
    return t


def write_safetensors(path, tensors):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(a.data)]}
        off += len(a.data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for a in tensors.values():
            f.write(a.data)


def read_pieces(path, vocab):
    """[(piece, score)] in id order, pieces in sentencepiece's spelling."""
    with open(path, "rb") as f:
        raw = f.read()
    pieces, off = [], 4
    while off < len(raw):
        if off + 8 > len(raw):
            fail("%s: token %d is cut short at byte %d" % (path, len(pieces), off))
        score, n = struct.unpack_from("<fi", raw, off)
        off += 8
        if n < 0 or off + n > len(raw) or not math.isfinite(score):
            fail("%s: token %d has length %d at byte %d (file %d bytes)" % (path, len(pieces), n, off, len(raw)))
        try:
            text = raw[off:off + n].decode("utf-8")
        except UnicodeDecodeError:
            text = None  # a raw byte token; its spelling comes from its id
        off += n
        pieces.append((text, score))
    if len(pieces) != vocab:
        fail("%s: %d tokens, the checkpoint has %d" % (path, len(pieces), vocab))
    out = []
    for i, (text, score) in enumerate(pieces):
        if i < 3:
            text = ("<unk>", "<s>", "</s>")[i]
        elif i < 259:
            text = "<0x%02X>" % (i - 3)
        elif text is None:
            fail("%s: token %d is not UTF-8" % (path, i))
        else:
            text = text.replace(" ", "\u2581")
        out.append((text, score))
    if len({t for t, _ in out}) != len(out):
        fail("%s: pieces are not unique" % path)
    return out


def merges(pieces):
    ids = {t: i for i, (t, _) in enumerate(pieces)}
    ranked = []
    for i, (t, score) in enumerate(pieces):
        if i < 259:
            continue  # specials and bytes are never the result of a merge
        for cut in range(1, len(t)):
            left, right = t[:cut], t[cut:]
            if ids.get(left, 0) >= 259 and ids.get(right, 0) >= 259:
                ranked.append((-score, ids[left], ids[right], left + " " + right))
    ranked.sort()
    return [m for *_, m in ranked]


def tokenizer_json(pieces):
    special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, (t, _) in enumerate(pieces[:3])]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": {t: i for i, (t, _) in enumerate(pieces)}, "merges": merges(pieces)},
    }


def tokenizer_config(h):
    return {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer", "model_max_length": h["seq"],
            "clean_up_tokenization_spaces": False, "legacy": True}


def config(h):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": h["dim"], "intermediate_size": h["hidden"], "num_hidden_layers": h["layers"],
        "num_attention_heads": h["heads"], "num_key_value_heads": h["kv_heads"], "head_dim": h["head_dim"],
        "vocab_size": h["vocab"], "max_position_embeddings": h["seq"], "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": h["tied"],
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)


def main():
    if len(sys.argv) != 4:
        fail("usage: convert.py MODEL_BIN TOKENIZER_BIN OUT_DIR")
    src, tok, out = sys.argv[1:]
    with open(src, "rb") as f:
        raw = f.read()
    h = read_header(raw, src)
    tensors = hf_tensors(read_blocks(raw, h, src), h)
    pieces = read_pieces(tok, h["vocab"])
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    write_json(os.path.join(out, "config.json"), config(h))
    write_json(os.path.join(out, "generation_config.json"), {"bos_token_id": 1, "eos_token_id": 2})
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_json(pieces))
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config(h))
    print("%s: dim %d, %d layers, %d heads, vocab %d, %.1f M parameters -> %s" % (
        src, h["dim"], h["layers"], h["heads"], h["vocab"],
        sum(len(a.data) for a in tensors.values()) / 4e6, out))


if __name__ == "__main__":
    main()
