#!/usr/bin/env python3
"""Tokenizer goldens from the reference `tokenizers` library.

  tokenizer_goldens.py TOKDIR CORPUS.jsonl OUTDIR [--bench BENCH.txt]

TOKDIR holds one sub-directory per tokenizer (tokenizer.json +
tokenizer_config.json). For every corpus line and tokenizer, writes
OUTDIR/<name>.jsonl with:
  ids        encode(text, add_special_tokens=False)
  ids_sp     encode(text, add_special_tokens=True)
  dec        decode(ids, skip_special_tokens=False)
  dec_sp     decode(ids_sp, skip_special_tokens=False)
  dec_skip   decode(ids_sp, skip_special_tokens=True)
  dec_tail   decode(ids[1:], skip_special_tokens=False) (starts mid-character
             for multi-byte text: exercises the U+FFFD replacement)
  hf_sp      transformers AutoTokenizer(text)["input_ids"], only when it
             differs from ids_sp; informational, not a parity target
             (transformers rebuilds some pipelines from the tokenizer
             class, e.g. DeepSeek V3's LlamaTokenizer)
With --bench, also measures single-thread encode throughput of the
reference on BENCH.txt and writes OUTDIR/bench.json."""
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402

NAMES = ["qwen3", "llama3", "gemma3", "deepseek_v3"]


def hf_tokenizer(path):
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:  # the golden stays usable without transformers
        print(f"transformers unavailable for {path}: {e}", file=sys.stderr)
        return None


def goldens(tokdir, texts, outdir):
    summary = {}
    for name in NAMES:
        path = os.path.join(tokdir, name)
        tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        hf = hf_tokenizer(path)
        n_diff = 0
        with open(os.path.join(outdir, name + ".jsonl"), "w", encoding="utf-8") as f:
            for i, text in enumerate(texts):
                ids = tok.encode(text, add_special_tokens=False).ids
                ids_sp = tok.encode(text, add_special_tokens=True).ids
                rec = {
                    "i": i,
                    "ids": ids,
                    "ids_sp": ids_sp,
                    "dec": tok.decode(ids, skip_special_tokens=False),
                    "dec_sp": tok.decode(ids_sp, skip_special_tokens=False),
                    "dec_skip": tok.decode(ids_sp, skip_special_tokens=True),
                    "dec_tail": tok.decode(ids[1:], skip_special_tokens=False),
                }
                if hf is not None:
                    hf_ids = hf(text, add_special_tokens=True)["input_ids"]
                    if hf_ids != ids_sp:
                        rec["hf_sp"] = hf_ids
                        n_diff += 1
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        summary[name] = {"lines": len(texts), "hf_differs": n_diff,
                         "hf_class": type(hf).__name__ if hf is not None else None}
    return summary


def bench(tokdir, path):
    with open(path, encoding="utf-8", newline="") as f:  # the exact bytes
        text = f.read()
    nbytes = len(text.encode("utf-8"))
    lines = text.split("\n")
    res = {"bytes": nbytes}
    for name in NAMES:
        tok = Tokenizer.from_file(os.path.join(tokdir, name, "tokenizer.json"))
        r = {}
        for mode in ("whole", "lines"):
            best, first, n_tok = None, None, 0
            for _ in range(3):
                t0 = time.perf_counter()
                if mode == "whole":
                    n_tok = len(tok.encode(text, add_special_tokens=False).ids)
                else:
                    n_tok = sum(len(tok.encode(l, add_special_tokens=False).ids) for l in lines)
                dt = time.perf_counter() - t0
                first = dt if first is None else first
                best = dt if best is None else min(best, dt)
            r[mode] = {"tokens": n_tok, "first_s": first, "best_s": best,
                       "MBps_best": nbytes / best / 1e6, "MBps_first": nbytes / first / 1e6}
        res[name] = r
    return res


def main():
    if len(sys.argv) not in (4, 6):
        sys.exit(__doc__)
    tokdir, corpus, outdir = sys.argv[1:4]
    os.makedirs(outdir, exist_ok=True)
    with open(corpus, encoding="utf-8") as f:
        texts = [json.loads(l)["text"] for l in f if l.strip()]
    summary = goldens(tokdir, texts, outdir)
    print(json.dumps(summary))
    if len(sys.argv) == 6 and sys.argv[4] == "--bench":
        import tokenizers
        b = bench(tokdir, sys.argv[5])
        b["tokenizers_version"] = tokenizers.__version__
        with open(os.path.join(outdir, "bench.json"), "w") as f:
            json.dump(b, f, indent=1)
        print(json.dumps(b))


if __name__ == "__main__":
    main()
