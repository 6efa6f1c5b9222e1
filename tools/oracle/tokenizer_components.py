#!/usr/bin/env python3
"""Goldens for the tokenizer's components, from the reference `tokenizers`.

  tokenizer_components.py OUT.jsonl

Each line: {"kind": "norm"|"pretok"|"decoder"|"tokenizer", "config": ...,
"cases": [...]} where a case is {"in": ..., "out": ...}:
  norm      in: text, out: normalize_str(text)
  pretok    in: text, out: [piece, ...] of pre_tokenize_str(text)
  decoder   in: [token, ...], out: decoder.decode(tokens)
  tokenizer in: {"text", "special"} → out: ids, or in: {"ids", "skip"} → out: text
Components are exercised inside a minimal tokenizer.json so that they are
built from JSON exactly as ember builds them."""
import json
import sys

from tokenizers import Tokenizer

EMPTY_MODEL = {"type": "BPE", "vocab": {"a": 0}, "merges": []}


def wrap(**parts):
    d = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": EMPTY_MODEL}
    d.update(parts)
    return Tokenizer.from_str(json.dumps(d))


S = lambda s: {"String": s}
R = lambda r: {"Regex": r}
TEXTS = ["Hello  world!", " a  b ", "x12 y3.5z", "hi, there! ¿qué? (ok)", "ÀİBﬁ① ǅ",
         "e\u0301 \u00e9", "tab\there\nnew\r\nline", "", "▁already ▁▁x", "ab12cd__ef"]

NORMS = [
    {"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Lowercase"},
    {"type": "Strip", "strip_left": True, "strip_right": True},
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "Replace", "pattern": S(" "), "content": "\u2581"},
    {"type": "Replace", "pattern": R("\\s+"), "content": "_"},
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Prepend", "prepend": "#"}]},
]

PRETOKS = [{"type": "Split", "pattern": p, "behavior": b, "invert": inv}
           for p in (S(" "), R("\\d+"), R("\\s+"))
           for b in ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")
           for inv in (False, True)]
PRETOKS += [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False},
    {"type": "Digits", "individual_digits": True}, {"type": "Digits", "individual_digits": False},
    {"type": "Punctuation", "behavior": "Isolated"}, {"type": "Punctuation", "behavior": "MergedWithPrevious"},
    {"type": "Whitespace"}, {"type": "WhitespaceSplit"}, {"type": "BertPreTokenizer"},
    {"type": "CharDelimiterSplit", "delimiter": "_"},
    {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True}]},
]

TOKEN_LISTS = [["\u2581Hello", "\u2581world", "!"], ["\u2581\u2581a", "b\u2581"], ["<0x41>", "<0xC3>", "<0xA9>", "x"],
               ["<0xE4>", "<0xBD>", "y"], ["\u0120hi", "\u010a", "\u00c3", "\u00a9"], ["  a ", " b  "], []]
DECODERS = [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 1},
    {"type": "Replace", "pattern": S("\u2581"), "content": " "},
    {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": S("\u2581"), "content": " "},
                                      {"type": "ByteFallback"}, {"type": "Fuse"},
                                      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
]

# The hand-made SentencePiece-style tokenizer of tests/unit/test_tokenizer_parts.c.
T1 = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [
        {"id": 0, "content": "<unk>", "special": True, "normalized": False, "lstrip": False, "rstrip": False, "single_word": False},
        {"id": 1, "content": "<s>", "special": True, "normalized": False, "lstrip": False, "rstrip": False, "single_word": False},
        {"id": 2, "content": "</s>", "special": True, "normalized": False, "lstrip": False, "rstrip": False, "single_word": False},
        {"id": 13, "content": "<x>", "special": False, "normalized": False, "lstrip": True, "rstrip": True, "single_word": False},
        {"id": 14, "content": "ab!", "special": False, "normalized": False, "lstrip": False, "rstrip": False, "single_word": True}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": S(" "), "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": DECODERS[-1],
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "c": 6, "\u2581a": 7, "ab": 8,
                        "\u2581ab": 9, "abc": 10, "<0xC3>": 11, "<0xA9>": 12},
              "merges": [["\u2581", "a"], ["a", "b"], ["\u2581a", "b"], ["ab", "c"]]},
}
T1_TEXTS = ["ab abc", "", "\u00e9", "x\u20ac", "a <x> b", "xab! ab!", "<s>ab</s>", "  a  ", "abcabc cab",
            "<x><x> <x>", "ab!ab! ab!"]
T1_IDS = [[1, 9, 9, 6], [3, 11, 12, 4], [11], [4, 11, 11, 12, 4], [4, 11, 12], [99, 4], [13, 3, 13]]


def guarded(kind, cfg, run):
    # A configuration the reference rejects is recorded as such, not fatal.
    try:
        return {"kind": kind, "config": cfg, "cases": run()}
    except Exception as e:  # noqa: BLE001
        return {"kind": kind, "config": cfg, "error": str(e)}


def main():
    out = []
    for cfg in NORMS:
        out.append(guarded("norm", cfg, lambda: [
            {"in": t, "out": wrap(normalizer=cfg).normalizer.normalize_str(t)} for t in TEXTS]))
    for cfg in PRETOKS:
        out.append(guarded("pretok", cfg, lambda: [
            {"in": t, "out": [s for s, _ in wrap(pre_tokenizer=cfg).pre_tokenizer.pre_tokenize_str(t)]} for t in TEXTS]))
    for cfg in DECODERS:
        out.append(guarded("decoder", cfg, lambda: [
            {"in": l, "out": wrap(decoder=cfg).decoder.decode(l)} for l in TOKEN_LISTS]))

    def t1_cases():
        t = Tokenizer.from_str(json.dumps(T1))
        cases = [{"in": {"text": s, "special": sp}, "out": t.encode(s, add_special_tokens=sp).ids}
                 for s in T1_TEXTS for sp in (False, True)]
        cases += [{"in": {"ids": ids, "skip": sk}, "out": t.decode(ids, skip_special_tokens=sk)}
                  for ids in T1_IDS for sk in (False, True)]
        return cases
    out.append(guarded("tokenizer", T1, t1_cases))
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        for rec in out:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
