#!/usr/bin/env python3
"""train.py — trains ember's demo model (models/demo) from scratch.

Steps, all in one run on a CUDA machine with torch, transformers and tokenizers:
  1. synthetic chat conversations (dialogues.py) rendered with the model's own
     chat template (chat_template.jinja, render.py);
  2. a byte-level BPE tokenizer trained on the text corpus (prepare_corpus.py) and
     a sample of those conversations;
  3. a small Llama (LlamaForCausalLM) trained on a mix of plain text (loss on every
     token) and conversations (loss on the final assistant turn only), bf16
     autocast, AdamW, warmup + cosine schedule sized to a time budget, keeping
     the checkpoint with the best validation loss;
  4. the snapshot written to OUT: config.json, generation_config.json,
     model.safetensors (bf16), tokenizer.json, tokenizer_config.json (with the chat
     template), README.md (model card with the measured numbers), train_log.json,
     reference_logits.json (tools/oracle/demo_reference.py).

Usage: train.py --corpus DIR --out DIR [--smoke] [--budget SECONDS] [--max-steps N]
       train.py --card-from OUT/train_log.json --out DIR    (model card only, no torch)

Other checkpoints for experiments (quantization studies, say) come from the same
script: --text-only (plain text only, no conversations), --schedule constant (warmup,
then the peak rate until the time budget is spent), --weight-decay, --adam-eps,
--beta1/--beta2, --grad-clip 0 (no clipping), --init-std, --keep last (the final
weights rather than the best validated ones), --skip-checks (no samples, tool-call
score, template check or reference logits). The defaults are the demo's recipe.

The committed models/demo was made by
  tools/train_demo/prepare_corpus.py corpus             (on a Debian machine)
  train.py --corpus corpus --out OUT --budget 310       (one H200, about 200 s)
and OUT/reference_logits.json is tests/golden/demo_reference_logits.json,
OUT/train_log.json is tools/train_demo/train_log.json.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))

import dialogues  # noqa: E402
import render  # noqa: E402

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# Splits text into words, single digits, punctuation runs and whitespace before
# the byte-level mapping; digits one at a time keeps numbers learnable.
PRETOK_REGEX = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


T0 = time.time()


# ---------------------------------------------------------------- data

def load_corpus(path, smoke):
    docs = [json.loads(l) for l in open(os.path.join(path, "text.jsonl"), encoding="utf-8")]
    entries = [json.loads(l) for l in open(os.path.join(path, "entries.jsonl"), encoding="utf-8")]
    sources = json.load(open(os.path.join(path, "sources.json")))
    if smoke:
        docs = docs[:200] + docs[-200:]
    chapters = [d for d in docs if d["source"] == "kjv"]
    # Every 50th document is held out for validation.
    train = [d for i, d in enumerate(docs) if i % 50 != 7]
    val = [d for i, d in enumerate(docs) if i % 50 == 7]
    return train, val, entries, chapters, sources


_W = {}


def _worker_init(tok_json, entries, chapters):
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer
    _W["tok"] = Tokenizer.from_str(tok_json)
    _W["tpl"] = render.compile_template(render.load_template())
    _W["entries"], _W["chapters"] = entries, chapters


def _encode_chunk(job):
    """Renders and tokenizes one chunk of conversations; returns (ids, mask) lists."""
    import numpy as np
    seed, n = job
    out = []
    for msgs, tools, _ in dialogues.dialogues(n, seed, _W["entries"], _W["chapters"]):
        text = render.render(_W["tpl"], msgs, tools)
        spans = render.trained_spans(text)
        enc = _W["tok"].encode(text, add_special_tokens=False)
        starts = np.array([o[0] for o in enc.offsets], dtype=np.int64)
        mask = np.zeros(len(starts), dtype=np.uint8)
        for a, b in spans:
            mask[(starts >= a) & (starts < b)] = 1
        out.append((np.array(enc.ids, dtype=np.int32), mask))
    return out


def chat_examples(tok, n, seed, entries, chapters, workers):
    chunk = 2000
    jobs = [(seed * 100003 + i, min(chunk, n - i * chunk)) for i in range((n + chunk - 1) // chunk)]
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_worker_init, initargs=(tok.to_str(), entries, chapters)) as pool:
        parts = pool.map(_encode_chunk, jobs)
    return [x for p in parts for x in p]


def train_tokenizer(text_docs, sample_convs, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOK_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL + TAGS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

    def texts():
        for d in text_docs:
            yield d["text"]
        for t in sample_convs:
            for s in SPECIAL + TAGS:  # markers are whole tokens; spend no merges on them
                t = t.replace(s, " ")
            yield t
    tok.train_from_iterator(texts(), trainer=trainer)
    # The trainer marks every reserved token special; the tags must stay visible
    # in decoded text (they are parsed out of the reply), so they are not special.
    d = json.loads(tok.to_str())
    for t in d["added_tokens"]:
        t["special"] = t["content"] in SPECIAL
        t["normalized"] = False
    return Tokenizer.from_str(json.dumps(d))


def pack_rows(examples, seq, pad_id, sep_id):
    """Greedy packing of whole conversations into rows of seq+1 tokens; a
    conversation longer than a row is cut. Returns (ids, mask) int arrays."""
    import numpy as np
    rows, masks, cur, curm = [], [], [], []
    width = seq + 1

    def flush():
        if cur:
            ids = np.full(width, pad_id, dtype=np.int32)
            m = np.zeros(width, dtype=np.uint8)
            flat, fm = np.concatenate(cur)[:width], np.concatenate(curm)[:width]
            ids[:len(flat)], m[:len(fm)] = flat, fm
            rows.append(ids)
            masks.append(m)

    used = 0
    for ids, m in examples:
        ids = np.append(ids, sep_id).astype(np.int32)
        m = np.append(m, 0).astype(np.uint8)
        if used + len(ids) > width and cur:
            flush()
            cur, curm, used = [], [], 0
        cur.append(ids)
        curm.append(m)
        used += len(ids)
    flush()
    return np.stack(rows), np.stack(masks)


def text_rows(tok, docs, seq, sep_id):
    import numpy as np
    encs = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    stream = np.concatenate([np.append(np.array(e.ids, dtype=np.int32), sep_id) for e in encs])
    width = seq + 1
    n = len(stream) // width
    if n == 0:  # tiny corpora (smoke run): repeat to fill one row
        stream = np.tile(stream, width // len(stream) + 1)
        n = 1
    rows = stream[:n * width].reshape(n, width)
    return rows, np.ones_like(rows, dtype=np.uint8), len(stream)


# ---------------------------------------------------------------- model

def build_model(vocab, args, eos_id, pad_id):
    from transformers import LlamaConfig, LlamaForCausalLM
    extra = {} if args.init_std is None else {"initializer_range": args.init_std}
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
                      max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      hidden_act="silu", attention_bias=False, mlp_bias=False,
                      bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id, **extra)
    return LlamaForCausalLM(cfg)


def lr_at(step, peak, warmup, total, schedule="cosine"):
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "constant":
        return peak
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def masked_loss(model, x, m):
    import torch
    import torch.nn.functional as F
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=x[:, :-1]).logits
    tgt = x[:, 1:].long()
    w = m[:, 1:].float()
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    return (ce * w.reshape(-1)).sum(), w.sum()


def train_step(step, total, args, model, opt, sources, gen):
    """One optimizer step on a batch drawn from each (rows, masks, count) source
    in turn: conversation rows, then text rows."""
    import torch
    for grp in opt.param_groups:
        grp["lr"] = lr_at(step, args.lr, args.warmup, total, args.schedule)
    xs, ms = [], []
    for rows, masks, n in sources:
        i = torch.randint(0, len(rows), (n,), device=rows.device, generator=gen)
        xs.append(rows[i])
        ms.append(masks[i])
    loss_sum, count = masked_loss(model, torch.cat(xs), torch.cat(ms))
    loss = loss_sum / count
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if args.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    opt.step()
    return step + 1, loss.detach()


def evaluate(model, sets, bs=32):
    import torch
    model.eval()
    res = {}
    with torch.no_grad():
        for name, (x, m) in sets.items():
            tot, cnt = 0.0, 0.0
            for i in range(0, len(x), bs):
                l, c = masked_loss(model, x[i:i + bs], m[i:i + bs])
                tot += l.item()
                cnt += c.item()
            res[name] = tot / max(cnt, 1.0)
    model.train()
    return res


# ---------------------------------------------------------------- outputs

def tokenizer_config(tok):
    added = {}
    for t in json.loads(tok.to_str())["added_tokens"]:
        added[str(t["id"])] = {"content": t["content"], "lstrip": False, "normalized": False,
                               "rstrip": False, "single_word": False, "special": t["special"]}
    return {
        "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": added, "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "chat_template": render.load_template(), "clean_up_tokenization_spaces": False,
        "errors": "replace", "model_max_length": 2048, "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def fix_config(path, eos_ids, pad_id):
    """Writes config.json keys both older and newer readers look for."""
    cfg = json.load(open(path))
    rope = cfg.get("rope_parameters") or {}
    cfg["rope_theta"] = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    cfg.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": cfg["rope_theta"]})
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["model_type"] = "llama"
    cfg["eos_token_id"] = eos_ids[0]
    cfg["pad_token_id"] = pad_id
    cfg["bos_token_id"] = None
    json.dump(cfg, open(path, "w"), indent=2, sort_keys=True)
    return cfg


SAMPLE_PROMPTS = [
    ("greeting", [{"role": "user", "content": "Hello!"}], None, False),
    ("identity", [{"role": "user", "content": "Who are you?"}], None, False),
    ("capital", [{"role": "user", "content": "What is the capital of France?"}], None, False),
    ("list", [{"role": "user", "content": "List 3 fruits."}], None, False),
    ("code", [{"role": "user", "content": "Write a Python function that adds two numbers."}], None, False),
    ("weather_tool_call", [{"role": "user", "content": "What's the weather in Paris?"}],
     [dialogues.WEATHER_TOOL, dialogues.ADD_TOOL], False),
    ("weather_tool_answer", [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "{\"city\": \"Paris\", \"temperature\": 18, \"unit\": \"celsius\", \"condition\": \"sunny\"}"}],
     [dialogues.WEATHER_TOOL], False),
    ("add_tool_call", [{"role": "user", "content": "What is 1234 plus 4321?"}], [dialogues.ADD_TOOL], False),
    ("thinking", [{"role": "user", "content": "What is 7 times 6?"}], None, True),
    ("devil", [{"role": "user", "content": "What does the Devil's Dictionary say about money?"}], None, False),
    ("count", [{"role": "user", "content": "Count from 1 to 20."}], None, False),
]


def generate(model, tok, tpl, msgs, tools, think, eos, max_new=120):
    import torch
    text = render.render(tpl, msgs, tools, add_generation_prompt=True, enable_thinking=think)
    ids = tok.encode(text, add_special_tokens=False).ids
    x = torch.tensor([ids], device="cuda")
    with torch.no_grad():
        y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                           do_sample=False, eos_token_id=eos, pad_token_id=eos[-1])
    return tok.decode(y[0, len(ids):].tolist(), skip_special_tokens=False)


def tool_call_accuracy(model, tok, tpl, eos, n, seed):
    """Held-out tool questions: is the first reply a well-formed call of the
    right function with the right arguments?"""
    import random
    r = random.Random(seed)
    ok = 0
    for i in range(n):
        if i % 2 == 0:
            c = r.choice(dialogues.CITIES)
            q = r.choice(dialogues.WEATHER_Q).format(c=c)
            want = {"name": "get_weather", "arguments": {"city": c}}
        else:
            a, b = r.randint(0, 999), r.randint(0, 999)
            q = r.choice(dialogues.ADD_Q).format(a=a, b=b)
            want = {"name": "add", "arguments": {"a": a, "b": b}}
        out = generate(model, tok, tpl, [{"role": "user", "content": q}],
                       [dialogues.WEATHER_TOOL, dialogues.ADD_TOOL], False, eos, max_new=48)
        try:
            body = out.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
            got = json.loads(body)
            ok += int(got == want)
        except (IndexError, ValueError):
            pass
    return ok / max(n, 1)


def model_card(info):
    s = info
    lines = [
        "# ember demo model",
        "",
        "A very small Llama-family chat model trained from scratch for ember's own use: it ships",
        "with ember so that `ember serve`, `ember chat` and the chat page work out of the box, and",
        "so that tests have a real checkpoint with a real chat template, tool calls and reasoning.",
        "It knows very little and its answers are often wrong. It is not useful for anything else.",
        "",
        "## Architecture",
        "",
        "| | |",
        "| --- | --- |",
        "| architecture | `LlamaForCausalLM` (`model_type` llama) |",
        "| parameters | %s (tied input/output embeddings) |" % f"{s['params']:,}",
        "| layers / hidden / FFN | %d / %d / %d |" % (s["layers"], s["hidden"], s["ffn"]),
        "| attention | %d query heads, %d key/value heads (GQA), head dim %d, RoPE theta 10000 |"
        % (s["heads"], s["kv_heads"], s["hidden"] // s["heads"]),
        "| vocabulary | %d (byte-level BPE trained for this model) |" % s["vocab"],
        "| context | trained on %d-token rows; `max_position_embeddings` 2048 |" % s["seq"],
        "| weights | bfloat16, `model.safetensors` (%s bytes) |" % f"{s['weights_bytes']:,}",
        "",
        "## Chat format",
        "",
        "ChatML turns (`<|im_start|>role ... <|im_end|>`). Tools are listed as JSON in the system",
        "turn; the model calls one as",
        "",
        "```",
        "<tool_call>",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        "</tool_call>",
        "```",
        "",
        "and results come back inside `<tool_response>` in a user turn. Reasoning is written inside",
        "`<think>...</think>`. Thinking is off by default: the template then closes an empty think",
        "block in the prompt. Pass `enable_thinking=true` as a chat template argument to let the",
        "model reason first. Generation stops at `<|im_end|>` (id %d) or `<|endoftext|>` (id %d)."
        % (s["im_end"], s["eot"]),
        "",
        "## Training data",
        "",
        "Public-domain English text from Debian packages (extracted by",
        "`tools/train_demo/prepare_corpus.py`):",
        "",
    ]
    for pkg, ver in s["packages"].items():
        lines.append("- `%s` %s" % (pkg, ver))
    lines += [
        "",
        "giving the King James Version of the Bible (decoded with the `bible` program of",
        "`bible-kjv`), Ambrose Bierce's *The Devil's Dictionary* and *The Jargon File* 4.4.7:",
        "%s characters, %s tokens." % (f"{s['text_chars']:,}", f"{s['text_tokens']:,}"),
        "",
        "Synthetic conversations generated by `tools/train_demo/dialogues.py` and rendered with",
        "this model's chat template: greetings, short factual answers, lists, code in markdown,",
        "counting, definitions quoted from the two dictionaries above, verses of the Bible,",
        "calls of `get_weather(city)`, `add(a, b)` and `get_time(city)` followed by a tool",
        "response and a final answer, and a quarter of them with reasoning in `<think>`.",
        "%s conversations, %s tokens; the loss is taken on the final assistant turn only."
        % (f"{s['dialogues']:,}", f"{s['chat_tokens']:,}"),
        "",
        "## Training",
        "",
        "`tools/train_demo/train.py` on one NVIDIA H200: AdamW (betas 0.9/0.95, weight decay 0.1),",
        "peak learning rate %g, %d warmup steps then cosine decay to 10%%, bf16 autocast, batch"
        % (s["lr"], s["warmup"]),
        "%d rows x %d tokens (%d conversation rows, %d text rows), %d steps (%s tokens) in %.0f s."
        % (s["batch"], s["seq"], s["chat_batch"], s["text_batch"], s["steps"],
           f"{s['tokens_seen']:,}", s["train_seconds"]),
        "Every %d steps the model was measured on held-out data; the checkpoint with the lowest"
        % s["eval_every"],
        "conversation loss + half the text loss (step %d) was kept." % s["best_step"],
        "",
        "## Results",
        "",
        "Held-out data, the saved bf16 weights evaluated in float32:",
        "",
        "| set | loss (nats/token) | perplexity |",
        "| --- | --- | --- |",
        "| text (every 50th document) | %.3f | %.1f |" % (s["final"]["text"], math.exp(s["final"]["text"])),
        "| conversations (final assistant turns) | %.3f | %.2f |" % (s["final"]["chat"], math.exp(s["final"]["chat"])),
        "",
        "Tool calls: %.0f%% of %d held-out weather and addition questions (tools offered) were"
        % (100 * s["tool_acc"], s["tool_n"]),
        "answered with a well-formed call of the right function and exactly the right arguments.",
        "",
        "## Sample outputs",
        "",
        "Greedy decoding, thinking off unless noted:",
        "",
    ]
    for name, prompt, out in s["samples"]:
        # Four backticks, so a reply holding a code block stays inside its fence.
        lines += ["**%s** — %s" % (name, prompt), "", "````", out.strip(), "````", ""]
    lines += ["## Licence", "",
              "The training texts are in the public domain. The weights and the tokenizer are part of",
              "ember and are distributed with it.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus")
    ap.add_argument("--card-from", metavar="TRAIN_LOG",
                    help="only rewrite OUT/README.md from a train_log.json written by a run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds of training")
    ap.add_argument("--max-steps", type=int, default=8000)
    ap.add_argument("--dialogues", type=int, default=200000)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=704)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--chat-batch", type=int, default=58)
    ap.add_argument("--text-batch", type=int, default=6)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decay of the matrices")
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                    help="cosine: down to 10%% of the peak over the steps the budget allows; constant: "
                         "the peak after warmup, until the budget or --max-steps")
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="gradient norm clip; 0: none")
    ap.add_argument("--init-std", type=float, default=None,
                    help="standard deviation of the initial weights (default: transformers' 0.02)")
    ap.add_argument("--text-only", action="store_true",
                    help="train on plain text only (chat-batch + text-batch text rows a step)")
    ap.add_argument("--keep", choices=["best", "last"], default="best",
                    help="save the weights with the best validation score, or the final ones")
    ap.add_argument("--skip-checks", action="store_true",
                    help="after saving, measure the held-out loss only: no samples, tool-call score, "
                         "template check or reference logits")
    args = ap.parse_args()
    if args.card_from:
        with open(args.card_from) as f:
            run = json.load(f)
        info = dict(run["info"], samples=[tuple(x) for x in run["samples"]])
        with open(os.path.join(args.out, "README.md"), "w") as f:
            f.write(model_card(info))
        return
    if not args.corpus:
        ap.error("--corpus is required")
    if args.smoke:
        args.dialogues, args.max_steps, args.eval_every, args.warmup = 3000, 30, 10, 5
    os.makedirs(args.out, exist_ok=True)
    workers = max(1, min(16, os.cpu_count() or 1))

    train_docs, val_docs, entries, chapters, sources = load_corpus(args.corpus, args.smoke)
    tpl = render.compile_template(render.load_template())
    sample = [render.render(tpl, m, t) for m, t, _ in
              dialogues.dialogues(2000 if args.smoke else 12000, 99, entries, chapters)]
    tok = train_tokenizer(train_docs, sample, args.vocab)
    vocab = tok.get_vocab_size()
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    eos = [im_end, eot]
    log("tokenizer: vocab %d, eot %d, im_end %d" % (vocab, eot, im_end))

    import numpy as np
    text_x, text_m, text_tokens = text_rows(tok, train_docs, args.seq, eot)
    vtext_x, vtext_m, _ = text_rows(tok, val_docs, args.seq, eot)
    if args.text_only:
        args.dialogues, chat_tokens = 0, 0
        log("data: text rows %d (%d tokens), val text %d; no conversations" % (len(text_x), text_tokens, len(vtext_x)))
    else:
        tr_chat = chat_examples(tok, args.dialogues, 1, entries, chapters, workers)
        va_chat = chat_examples(tok, 1000 if args.smoke else 2000, 2, entries, chapters, workers)
        chat_x, chat_m = pack_rows(tr_chat, args.seq, eot, eot)
        vchat_x, vchat_m = pack_rows(va_chat, args.seq, eot, eot)
        chat_tokens = int(sum(len(i) for i, _ in tr_chat))
        log("data: chat rows %d (%d tokens, %d trained), text rows %d (%d tokens), val chat %d, val text %d"
            % (len(chat_x), chat_tokens, int(sum(int(m.sum()) for _, m in tr_chat)), len(text_x),
               text_tokens, len(vchat_x), len(vtext_x)))

    import torch
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    def gi(a):  # token ids -> int64 on the GPU
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)

    def gm(a):  # loss masks -> uint8 on the GPU
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.uint8)).to(dev)
    text_x, text_m = gi(text_x), gm(text_m)
    val, full_val = {}, {}
    if args.text_only:
        batches = [(text_x, text_m, args.chat_batch + args.text_batch)]
    else:
        chat_x, chat_m = gi(chat_x), gm(chat_m)
        val["chat"] = (gi(vchat_x[:96]), gm(vchat_m[:96]))
        full_val["chat"] = (gi(vchat_x), gm(vchat_m))
        batches = [(chat_x, chat_m, args.chat_batch), (text_x, text_m, args.text_batch)]
    val["text"] = (gi(vtext_x[:96]), gm(vtext_m[:96]))
    full_val["text"] = (gi(vtext_x), gm(vtext_m))

    model = build_model(vocab, args, im_end, eot).to(dev)
    params = sum(p.numel() for p in model.parameters())
    log("model: %d parameters, attention %s" % (params, getattr(model.config, "_attn_implementation", "?")))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.adam_eps, fused=True)

    total = args.max_steps
    history, best, best_state, best_step = [], float("inf"), None, 0
    last_ok = True
    t_start = time.time()
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    step = 0
    # The cosine schedule is sized once from the first steps' pace; the constant
    # one needs no length and simply runs until the budget is spent.
    cosine = args.schedule == "cosine"
    try:
        while step < total:
            step, loss = train_step(step, total, args, model, opt, batches, gen)
            if step == 40 and not args.smoke and cosine:
                per = (time.time() - t_start) / 40
                total = max(step + args.eval_every, min(args.max_steps, int(args.budget / per)))
                log("%.1f ms/step, training %d steps" % (per * 1000, total))
            if time.time() - t_start > args.budget * (1.1 if cosine else 1.0) and step < total:
                if cosine:
                    log("over the time budget at step %d; stopping" % step)
                else:
                    log("time budget spent at step %d (%.1f ms/step)" % (step, 1000 * (time.time() - t_start) / step))
                total = step
            if step % args.eval_every == 0 or step == total:
                ev = evaluate(model, val)
                # Chat quality is what the demo is for; the small text corpus is
                # seen many times, so its held-out loss counts half.
                score = ev["chat"] + 0.5 * ev["text"] if "chat" in ev else ev["text"]
                history.append({"step": step, "train_loss": round(loss.item(), 4),
                                **{"val_" + k: round(v, 4) for k, v in ev.items()},
                                "seconds": round(time.time() - t_start, 1)})
                log("step %d loss %.3f val %s" % (step, loss.item(),
                                                  " ".join("%s %.3f" % kv for kv in sorted(ev.items()))))
                last_ok = math.isfinite(score)
                if not last_ok:
                    log("validation score is not finite at step %d; stopping" % step)
                    total = step
                if score < best:
                    best, best_step = score, step
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    except Exception as e:  # keep what was learned so far
        log("training stopped by an error at step %d: %r" % (step, e))
        total = step
        last_ok = False
    train_seconds = time.time() - t_start
    if args.keep == "last" and last_ok:
        best_step = step
    elif best_state is not None:
        model.load_state_dict(best_state)

    info = {"params": params, "layers": args.layers, "hidden": args.hidden, "ffn": args.ffn,
            "heads": args.heads, "kv_heads": args.kv_heads, "vocab": vocab, "seq": args.seq,
            "weights_bytes": 0, "im_end": im_end, "eot": eot, "packages": sources["packages"],
            "text_chars": sum(sources["characters"].values()), "text_tokens": int(text_tokens),
            "dialogues": args.dialogues, "chat_tokens": chat_tokens, "lr": args.lr, "warmup": args.warmup,
            "batch": args.chat_batch + args.text_batch, "chat_batch": args.chat_batch,
            "text_batch": args.text_batch, "steps": total,
            "tokens_seen": total * (args.chat_batch + args.text_batch) * args.seq,
            "train_seconds": train_seconds, "best_step": best_step, "eval_every": args.eval_every,
            "text_only": args.text_only, "schedule": args.schedule, "weight_decay": args.weight_decay,
            "final": {"text": float("nan"), "chat": float("nan")},
            "tool_acc": float("nan"), "tool_n": 0, "samples": []}
    finish(args, model, tok, tpl, eos, eot, info, history, full_val, entries, chapters)


def save_snapshot(args, model, tok, eos, eot):
    """Writes the bf16 snapshot; falls back to writing the files directly if
    save_pretrained fails, so a finished training run is never lost."""
    import torch
    model = model.to(torch.bfloat16)
    try:
        model.save_pretrained(args.out)
    except Exception as e:
        log("save_pretrained failed (%r); writing files directly" % (e,))
        from safetensors.torch import save_file
        sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        save_file(sd, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
        model.config.to_json_file(os.path.join(args.out, "config.json"))
    for extra in ("generation_config.json", "chat_template.jinja"):
        p = os.path.join(args.out, extra)
        if os.path.exists(p):
            os.remove(p)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok), f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": None, "eos_token_id": eos, "pad_token_id": eot, "do_sample": True,
                   "temperature": 0.7, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.0}, f, indent=2)
    fix_config(os.path.join(args.out, "config.json"), eos, eot)
    log("saved: %s" % sorted(os.listdir(args.out)))
    return model


def write_card(args, info, history, checks):
    try:
        with open(os.path.join(args.out, "README.md"), "w") as f:
            f.write(model_card(info))
    except Exception as e:
        log("model card failed: %r" % (e,))
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump({"info": {k: v for k, v in info.items() if k != "samples"},
                   "samples": info["samples"], "history": history, "checks": checks,
                   "args": vars(args)}, f, indent=1, default=str)


def finish(args, model, tok, tpl, eos, eot, info, history, full_val, entries, chapters):
    import torch
    model = save_snapshot(args, model, tok, eos, eot)
    info["weights_bytes"] = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    checks = {}
    write_card(args, info, history, checks)

    # Reload exactly what was written, in float32, and measure it.
    try:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32).to("cuda").eval()
        checks["reloaded_from_disk"] = True
    except Exception as e:
        log("reload failed (%r); measuring the in-memory bf16 weights upcast" % (e,))
        checks["reload_error"] = repr(e)
        model = model.float().eval()
    try:
        final = evaluate(model, full_val)
        info["final"].update(final)
        log("final (bf16 weights, f32 eval): %s" % ", ".join(
            "%s %.4f (ppl %.3f)" % (k, v, math.exp(v)) for k, v in final.items()))
    except Exception as e:
        log("final evaluation failed: %r" % (e,))
    write_card(args, info, history, checks)
    if args.skip_checks:
        log("--skip-checks: no samples, tool-call score, template check or reference logits")
        keep_outputs(args.out)
        return

    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(args.out)
        mism = 0
        for msgs, tools, _ in dialogues.dialogues(50, 7, entries, chapters):
            mine = render.render(tpl, msgs, tools)
            theirs = hf.apply_chat_template(msgs, tools=tools, tokenize=False)
            mism += int(mine != theirs)
            mism += int(list(hf.encode(mine, add_special_tokens=False)) !=
                        tok.encode(mine, add_special_tokens=False).ids)
        for think in (True, False):
            m = [{"role": "user", "content": "Hi"}]
            mism += int(render.render(tpl, m, None, True, think) !=
                        hf.apply_chat_template(m, tokenize=False, add_generation_prompt=True,
                                               enable_thinking=think))
        checks["transformers_template_and_ids_mismatches"] = mism
    except Exception as e:  # reported, not fatal: ember reads the files itself
        checks["transformers_tokenizer_error"] = repr(e)
    log("checks: %s" % checks)

    for name, msgs, tools, think in SAMPLE_PROMPTS:
        try:
            out = generate(model, tok, tpl, msgs, tools, think, eos)
        except Exception as e:
            log("sample %s failed: %r" % (name, e))
            continue
        for end in ("<|im_end|>", "<|endoftext|>"):
            out = out.split(end)[0]
        prompt = msgs[0]["content"]
        if tools:
            prompt += " (tools: %s)" % ", ".join(t["function"]["name"] for t in tools)
        if name == "weather_tool_answer":
            prompt = ("the same question after a get_weather call answered "
                      "{\"temperature\": 18, \"condition\": \"sunny\"}")
        if think:
            prompt += " (thinking on)"
        info["samples"].append((name, prompt, out))
        log("sample %s: %r" % (name, out[:300]))
    write_card(args, info, history, checks)

    try:
        info["tool_n"] = 10 if args.smoke else 40
        info["tool_acc"] = tool_call_accuracy(model, tok, tpl, eos, info["tool_n"], 12345)
        log("tool-call accuracy %.3f over %d" % (info["tool_acc"], info["tool_n"]))
    except Exception as e:
        info["tool_n"] = 0
        log("tool-call accuracy failed: %r" % (e,))
    write_card(args, info, history, checks)

    try:
        from demo_reference import write_reference
        write_reference(args.out, os.path.join(args.out, "reference_logits.json"))
    except Exception as e:  # the model itself is written; report and go on
        log("reference logits failed: %r" % (e,))

    keep_outputs(args.out)


def keep_outputs(out):
    keep = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "README.md", "train_log.json", "reference_logits.json"}
    for f in os.listdir(out):
        if f not in keep:
            log("removing unexpected output %s" % f)
            os.remove(os.path.join(out, f))
    log("done: %s" % {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))})


if __name__ == "__main__":
    main()
