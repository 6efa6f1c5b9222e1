#!/usr/bin/env python3
"""train_qwen3_5_mtp.py — trains a small Qwen3.5-family model together with a
multi-token-prediction (MTP) head, for ember's speculative decoding (--spec mtp).

The trunk is transformers' Qwen3_5ForCausalLM (model_type qwen3_5_text: Gated
DeltaNet layers with a gated full-attention layer every 4th), the vocabulary is the
demo tokenizer's (models/demo/tokenizer.json, 8192 ids), the data the demo corpus
(prepare_corpus.py output, conversations from dialogues.py rendered with the demo
chat template, plain text). transformers does not run the MTP head, so it is
written in PyTorch (mtp_head.py) exactly as ember computes it. The loss is

    trunk next-token loss + mtp_weight * MTP loss (predicting x_{t+2} from x_{t+1}, h_t)

with bf16 autocast, AdamW, warmup + cosine decay sized to a wall-clock budget.

Written to OUT:
  config.json              Qwen3_5ForCausalLM config with mtp_num_hidden_layers = 1
  model.safetensors        bf16: model.* (tied embeddings, no lm_head) and mtp.*
  tokenizer.json, tokenizer_config.json, generation_config.json (from models/demo)
  reference_logits.json    trunk logits of the demo reference prompts, transformers, float32
                           (tools/oracle/demo_reference.py format)
  reference_mtp.json       per prompt: ids, trunk top-5 and the MTP head's top-5 at each
                           pair, float32 from the saved bf16 weights
  bench_prompt_text.txt    a held-out corpus passage, and
  bench_prompt_chat.txt    a rendered chat prompt, for `ember bench --prompt-file`
  train_log.json           arguments, history, final held-out metrics, checks

Usage (one CUDA GPU, torch + transformers + tokenizers + safetensors + jinja2):
  tools/train_demo/prepare_corpus.py corpus           # on a machine with the Debian archive
  tools/train_demo/train_qwen3_5_mtp.py --corpus corpus --out OUT [--minutes 4]
  tools/train_demo/train_qwen3_5_mtp.py --corpus corpus --out OUT --smoke   # a minute, tiny
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))

import render  # noqa: E402

T0 = time.time()


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


def layer_types(n_layers, interval):
    """A full-attention layer every `interval`-th layer, linear attention elsewhere."""
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="train a small Qwen3.5 model with an MTP head")
    ap.add_argument("--corpus", required=True, help="prepare_corpus.py output directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-dir", default=os.path.join(ROOT, "models", "demo"),
                    help="tokenizer.json, tokenizer_config.json and generation_config.json come from here")
    ap.add_argument("--minutes", type=float, default=4.0, help="wall-clock budget of the training loop")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--smoke", action="store_true", help="tiny data and model, 40 steps: checks the pipeline")
    ap.add_argument("--dialogues", type=int, default=100000)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--full-every", type=int, default=4, help="every Nth layer is full attention")
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--partial-rotary", type=float, default=0.25)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--lin-k-heads", type=int, default=4)
    ap.add_argument("--lin-v-heads", type=int, default=8)
    ap.add_argument("--lin-k-dim", type=int, default=64)
    ap.add_argument("--lin-v-dim", type=int, default=48)
    ap.add_argument("--conv-kernel", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--chat-batch", type=int, default=48)
    ap.add_argument("--text-batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--mtp-weight", type=float, default=0.5, help="weight of the MTP loss")
    ap.add_argument("--mtp-detach", action="store_true",
                    help="stop the MTP loss's gradient at the trunk's hidden state")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.smoke:
        a.dialogues, a.max_steps, a.eval_every, a.warmup = 3000, 40, 20, 5
        a.hidden, a.ffn, a.layers, a.heads, a.kv_heads, a.head_dim = 128, 256, 4, 2, 1, 64
        a.lin_k_heads, a.lin_v_heads, a.lin_k_dim, a.lin_v_dim = 2, 4, 32, 32
        a.seq, a.chat_batch, a.text_batch = 256, 8, 4
    checks = [(a.hidden > 0, "--hidden"), (a.layers > 0, "--layers"), (a.heads % a.kv_heads == 0, "--heads/--kv-heads"),
              (a.lin_v_heads % a.lin_k_heads == 0, "--lin-v-heads/--lin-k-heads"),
              (int(a.head_dim * a.partial_rotary) >= 2, "--partial-rotary"), (a.minutes > 0, "--minutes"),
              ("full_attention" in layer_types(a.layers, a.full_every), "--full-every (no full-attention layer)")]
    for ok, what in checks:
        if not ok:
            ap.error("bad value of %s" % what)
    for f in ("text.jsonl", "entries.jsonl", "sources.json"):
        if not os.path.isfile(os.path.join(a.corpus, f)):
            ap.error("%s has no %s: make the corpus with tools/train_demo/prepare_corpus.py DIR "
                     "(on a machine that reaches the Debian archive) and copy it here" % (a.corpus, f))
    if not os.path.isfile(os.path.join(a.tokenizer_dir, "tokenizer.json")):
        ap.error("%s has no tokenizer.json" % a.tokenizer_dir)
    return a


# ---------------------------------------------------------------- data

def load_data(args, tok, workers):
    """Packed (ids, mask) rows of conversations and of text, train and held out,
    made as train.py makes them."""
    import train as demo  # noqa: E402 - the demo trainer's corpus and packing helpers
    train_docs, val_docs, entries, chapters, _ = demo.load_corpus(args.corpus, args.smoke)
    eot = tok.token_to_id("<|endoftext|>")
    tr_chat = demo.chat_examples(tok, args.dialogues, 1, entries, chapters, workers)
    va_chat = demo.chat_examples(tok, 600 if args.smoke else 2000, 2, entries, chapters, workers)
    chat = demo.pack_rows(tr_chat, args.seq, eot, eot)
    vchat = demo.pack_rows(va_chat, args.seq, eot, eot)
    text = demo.text_rows(tok, train_docs, args.seq, eot)[:2]
    vtext = demo.text_rows(tok, val_docs, args.seq, eot)[:2]
    log("data: chat rows %d, text rows %d, held-out chat rows %d, text rows %d"
        % (len(chat[0]), len(text[0]), len(vchat[0]), len(vtext[0])))
    return chat, text, vchat, vtext, val_docs, entries, chapters


def bench_prompts(args, tok, val_docs, entries, chapters):
    """Two prompts for `ember bench --prompt-file`: held-out text and a chat turn."""
    import dialogues
    doc = next((d for d in val_docs if d["source"] == "kjv"), val_docs[0])
    ids = tok.encode(doc["text"], add_special_tokens=False).ids[:400]
    text = tok.decode(ids, skip_special_tokens=False)
    tpl = render.compile_template(render.load_template())
    msgs = [{"role": "user", "content": "Recite %s." % next(
        (d["title"] for d in val_docs if d["source"] == "kjv"), "Genesis 1")}]
    chat = render.render(tpl, msgs, None, add_generation_prompt=True, enable_thinking=False)
    # a longer chat prompt: a held-out conversation's opening turns, then the generation prompt
    for m, tools, _ in dialogues.dialogues(50, 4242, entries, chapters):
        if tools is None and len(m) >= 2:
            chat = render.render(tpl, m[:-1], None, add_generation_prompt=True, enable_thinking=False)
            if len(tok.encode(chat, add_special_tokens=False).ids) >= 64:
                break
    for name, body in (("bench_prompt_text.txt", text), ("bench_prompt_chat.txt", chat)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(body)
        log("%s: %d tokens" % (name, len(tok.encode(body, add_special_tokens=False).ids)))


# ---------------------------------------------------------------- model

def text_config(args, vocab, eos, pad):
    from transformers import Qwen3_5TextConfig
    kw = dict(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
              num_hidden_layers=args.layers, num_attention_heads=args.heads,
              num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
              linear_num_key_heads=args.lin_k_heads, linear_num_value_heads=args.lin_v_heads,
              linear_key_head_dim=args.lin_k_dim, linear_value_head_dim=args.lin_v_dim,
              linear_conv_kernel_dim=args.conv_kernel, layer_types=layer_types(args.layers, args.full_every),
              max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=True,
              hidden_act="silu", attention_bias=False, bos_token_id=None, eos_token_id=eos,
              pad_token_id=pad)
    rope = {"rope_type": "default", "rope_theta": args.rope_theta, "partial_rotary_factor": args.partial_rotary}
    try:
        return Qwen3_5TextConfig(rope_parameters=rope, partial_rotary_factor=args.partial_rotary, **kw)
    except Exception as e:  # noqa: BLE001 - versions that take the factor only inside rope_parameters
        log("config retry without the partial_rotary_factor argument: %r" % (e,))
        return Qwen3_5TextConfig(rope_parameters=rope, **kw)


def build(args, vocab, eos, pad, dev):
    import torch
    from transformers import AutoModelForCausalLM
    from mtp_head import MTPHead
    cfg = text_config(args, vocab, eos, pad)
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(cfg)  # Qwen3_5ForCausalLM
    if not hasattr(model, "model") or not hasattr(model.model, "embed_tokens"):
        raise RuntimeError("unexpected model class %s" % type(model).__name__)
    head = MTPHead(cfg)
    head.init_weights(getattr(cfg, "initializer_range", 0.02))
    return model.to(dev), head.to(dev)


def forward_losses(model, head, x, m, detach, amp=True):
    """Summed masked losses and counts of the trunk and the MTP head, and the
    MTP head's correct top-1 count and its agreement with the trunk's argmax.

    Row x has S+1 tokens; the trunk reads x[:S] and predicts x[1:]; the head's
    pair t (t = 0..S-2) is (x[t+1], h_t) at position t and predicts x[t+2]."""
    import torch
    import torch.nn.functional as F
    inp = x[:, :-1]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        h = model.model(input_ids=inp, use_cache=False).last_hidden_state   # final-normed, [B, S, H]
        logits = model.lm_head(h)
        emb = model.model.embed_tokens(inp[:, 1:])                  # embed(x_{t+1}), t = 0..S-2
        hm = head.hidden(emb, h[:, :-1].detach() if detach else h[:, :-1])
        mlogits = model.lm_head(hm)
    V = logits.shape[-1]
    w1 = m[:, 1:].float()
    ce = F.cross_entropy(logits.float().reshape(-1, V), x[:, 1:].reshape(-1), reduction="none")
    w2 = m[:, 2:].float()
    tgt2 = x[:, 2:]
    mce = F.cross_entropy(mlogits.float().reshape(-1, V), tgt2.reshape(-1), reduction="none")
    with torch.no_grad():
        mtop = mlogits.argmax(-1)
        hit = ((mtop == tgt2).float() * w2).sum()
        agree = ((mtop == logits[:, 1:].argmax(-1)).float() * w2).sum()  # greedy draft acceptance proxy
    return ((ce * w1.reshape(-1)).sum(), w1.sum(), (mce * w2.reshape(-1)).sum(), w2.sum(), hit, agree)


def lr_at(step, peak, warmup, total):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def evaluate(model, head, sets, bs=16, amp=True):
    import torch
    model.eval()
    head.eval()
    res = {}
    with torch.no_grad():
        for name, (x, m) in sets.items():
            acc = [0.0] * 6
            for i in range(0, len(x), bs):
                for k, v in enumerate(forward_losses(model, head, x[i:i + bs], m[i:i + bs], False, amp)):
                    acc[k] += float(v)
            res[name] = {"trunk_loss": acc[0] / max(acc[1], 1), "mtp_loss": acc[2] / max(acc[3], 1),
                         "mtp_top1": acc[4] / max(acc[3], 1), "mtp_agrees_with_trunk": acc[5] / max(acc[3], 1),
                         "tokens": int(acc[1])}
    model.train()
    head.train()
    return res


def fmt_eval(ev):
    return ", ".join("%s: trunk %.3f mtp %.3f top1 %.3f agree %.3f" % (
        k, v["trunk_loss"], v["mtp_loss"], v["mtp_top1"], v["mtp_agrees_with_trunk"]) for k, v in ev.items())


def train(args, model, head, data, dev):
    import numpy as np
    import torch
    chat, text, vchat, vtext = data

    def gi(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)

    chat_x, chat_m, text_x, text_m = gi(chat[0]), gi(chat[1]), gi(text[0]), gi(text[1])
    val = {"chat": (gi(vchat[0][:64]), gi(vchat[1][:64])), "text": (gi(vtext[0][:64]), gi(vtext[1][:64]))}
    params = list(model.parameters()) + list(head.parameters())
    named = list(model.named_parameters()) + [("mtp." + n, p) for n, p in head.named_parameters()]
    decay = [p for n, p in named if p.dim() >= 2 and "embed" not in n]
    other = [p for n, p in named if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=True)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed + 1)
    budget = args.minutes * 60.0
    total, step, history = args.max_steps, 0, []
    t_start = time.time()
    model.train()
    head.train()
    t5 = None
    try:
        while step < total:
            step, trunk_loss, mtp_loss = train_step(args, model, head, opt, params, step, total, gen,
                                                    chat_x, chat_m, text_x, text_m)
            if step == 5:
                torch.cuda.synchronize()
                t5 = time.time()
            if step == 25 and not args.smoke:
                torch.cuda.synchronize()
                per = (time.time() - t5) / 20  # past the first steps' warm-up
                left = budget - (time.time() - t_start)
                # evaluation costs a few per cent at this cadence; leave it room
                total = max(step + 1, min(args.max_steps, step + int(0.96 * left / per)))
                log("%.1f ms/step, training %d steps (%.1f min)" % (per * 1000, total, args.minutes))
            if time.time() - t_start > budget * 1.05 and step < total:
                log("over the time budget at step %d; stopping" % step)
                total = step
            if step % args.eval_every == 0 or step == total or step == 1:
                ev = evaluate(model, head, val)
                history.append({"step": step, "train_trunk": round(trunk_loss, 4), "train_mtp": round(mtp_loss, 4),
                                "seconds": round(time.time() - t_start, 1), "val": ev})
                log("step %d/%d loss trunk %.3f mtp %.3f | val %s" % (step, total, trunk_loss, mtp_loss, fmt_eval(ev)))
    except Exception as e:  # noqa: BLE001 - keep what was learned so far
        import traceback
        traceback.print_exc()
        log("training stopped by an error at step %d: %r" % (step, e))
        if step == 0:
            raise
    return history, time.time() - t_start, step


def train_step(args, model, head, opt, params, step, total, gen, chat_x, chat_m, text_x, text_m):
    """One optimizer step on a batch of conversation rows and text rows."""
    import torch
    dev = chat_x.device
    for grp in opt.param_groups:
        grp["lr"] = lr_at(step, args.lr, args.warmup, total)
    ci = torch.randint(0, len(chat_x), (args.chat_batch,), device=dev, generator=gen)
    ti = torch.randint(0, len(text_x), (args.text_batch,), device=dev, generator=gen)
    x = torch.cat([chat_x[ci], text_x[ti]])
    m = torch.cat([chat_m[ci], text_m[ti]])
    l1, c1, l2, c2, _, _ = forward_losses(model, head, x, m, args.mtp_detach)
    trunk_loss, mtp_loss = l1 / c1.clamp(min=1), l2 / c2.clamp(min=1)
    loss = trunk_loss + args.mtp_weight * mtp_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return step + 1, trunk_loss.item(), mtp_loss.item()


# ---------------------------------------------------------------- outputs

def save(args, model, head, tok_dir):
    """Writes the checkpoint ember loads: the trunk as transformers saves it,
    then the mtp.* tensors added to the same file and mtp_num_hidden_layers
    to config.json."""
    import torch
    from safetensors.torch import load_file, save_file
    from mtp_head import mtp_state_dict
    model = model.to(torch.bfloat16)
    path = os.path.join(args.out, "model.safetensors")
    try:
        model.save_pretrained(args.out, safe_serialization=True)
    except Exception as e:  # noqa: BLE001 - never lose a finished run
        log("save_pretrained failed (%r); writing the files directly" % (e,))
        sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        save_file(sd, path, metadata={"format": "pt"})
        model.config.to_json_file(os.path.join(args.out, "config.json"))
    shards = [f for f in os.listdir(args.out) if f.startswith("model-") and f.endswith(".safetensors")]
    if shards or not os.path.exists(path):
        raise RuntimeError("expected one model.safetensors, found %s" % sorted(os.listdir(args.out)))
    w = load_file(path)
    w.pop("lm_head.weight", None)  # tied: the head is the embedding
    w.update({k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in mtp_state_dict(head).items()})
    save_file(w, path, metadata={"format": "pt"})
    cpath = os.path.join(args.out, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    c["mtp_num_hidden_layers"] = 1
    c["mtp_use_dedicated_embeddings"] = False
    c["architectures"] = ["Qwen3_5ForCausalLM"]
    c["model_type"] = "qwen3_5_text"
    c["tie_word_embeddings"] = True
    c["dtype"] = c["torch_dtype"] = "bfloat16"
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(args.out, name))
    stray = os.path.join(args.out, "chat_template.jinja")
    if os.path.exists(stray):
        os.remove(stray)
    n_mtp = sum(1 for k in w if k.startswith("mtp."))
    log("saved %s: %d tensors (%d mtp.*), %d bytes" % (path, len(w), n_mtp, os.path.getsize(path)))
    return model


def reload_checks(args, dev, checks):
    """Reloads exactly what was written, in float32: the trunk through
    transformers, the head from the mtp.* tensors; measures held-out data."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from mtp_head import MTPHead
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32).to(dev).eval()
    checks["reloaded_class"] = type(model).__name__
    w = load_file(os.path.join(args.out, "model.safetensors"))
    head = MTPHead(model.config)
    missing = head.load_state_dict({k[4:]: v.float() for k, v in w.items() if k.startswith("mtp.")}, strict=True)
    checks["mtp_load"] = str(missing)
    head = head.to(dev).eval()
    return model, head


def layer_parity(model, head, dev, checks):
    """Our MTP decoder layer against transformers' own Qwen3_5DecoderLayer
    (full attention) with the same weights: they must agree."""
    import torch
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
        cfg = model.config
        idx = cfg.layer_types.index("full_attention")
        ref = mq.Qwen3_5DecoderLayer(cfg, idx).to(dev).float().eval()
        ref.load_state_dict(head.layers[0].state_dict(), strict=True)
        g = torch.Generator(device="cpu").manual_seed(5)
        B, S = 2, 37
        x = torch.randn(B, S, cfg.hidden_size, generator=g).to(dev)
        pos = torch.arange(S, device=dev)
        # an explicit additive causal mask: right whichever attention function the config names
        mask = torch.full((S, S), float("-inf"), device=dev).triu(1)[None, None].expand(B, 1, S, S)
        with torch.no_grad():
            try:  # the text rotary takes (3, B, S) position ids in recent versions
                pe = model.model.rotary_emb(x, pos.view(1, 1, -1).expand(3, B, -1))
            except Exception:  # noqa: BLE001
                pe = model.model.rotary_emb(x, pos.view(1, -1).expand(B, -1))
            want = ref(x, position_embeddings=pe, attention_mask=mask, position_ids=pos.view(1, -1).expand(B, -1))
            if isinstance(want, tuple):
                want = want[0]
            from mtp_head import rope_tables
            cos, sin = rope_tables(pos, head.head_dim, head.partial, head.theta, dev)
            got = head.layers[0](x, cos, sin)
        diff = (got - want).abs().max().item()
        checks["mtp_layer_vs_transformers_max_abs_diff"] = diff
        log("MTP decoder layer vs transformers Qwen3_5DecoderLayer: max |diff| %.3g%s"
            % (diff, "" if diff < 1e-3 else "  <-- MISMATCH"))
    except Exception as e:  # noqa: BLE001 - a check, not a step
        checks["mtp_layer_vs_transformers_error"] = repr(e)
        log("layer parity check could not run: %r" % (e,))


def write_mtp_reference(args, model, head, tok, dev):
    """Trunk and head top-5 for two prompts, float32 from the saved weights."""
    import torch
    tpl = render.compile_template(render.load_template())
    cases = [("chat", render.render(tpl, [{"role": "user", "content": "What is the capital of France?"}], None,
                                    add_generation_prompt=True, enable_thinking=False)),
             ("plain_text", "In the beginning God created the heaven and the earth. And the earth was")]
    out = {"note": "bf16 weights upcast to float32. trunk_top5[t] predicts ids[t+1]; mtp_top5[t] is the head "
                   "over the pair (ids[t+1], h_t) at position t and predicts ids[t+2]", "cases": []}
    for name, text in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        x = torch.tensor([ids], device=dev)
        with torch.no_grad():
            h = model.model(input_ids=x, use_cache=False).last_hidden_state
            logits = model.lm_head(h)[0]
            hm = head.hidden(model.model.embed_tokens(x[:, 1:]), h[:, :-1])
            ml = model.lm_head(hm)[0]
        tt, mt = torch.topk(logits, 5, -1), torch.topk(ml, 5, -1)
        out["cases"].append({"name": name, "text": text, "ids": ids,
                             "trunk_top5_ids": tt.indices.tolist(),
                             "trunk_top5_logits": [[round(v, 4) for v in r] for r in tt.values.tolist()],
                             "mtp_top5_ids": mt.indices.tolist(),
                             "mtp_top5_logits": [[round(v, 4) for v in r] for r in mt.values.tolist()],
                             "mtp_last_logits": [round(v, 4) for v in ml[-1].tolist()]})
    with open(os.path.join(args.out, "reference_mtp.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    if eot is None or im_end is None:
        sys.exit("train_qwen3_5_mtp: %s lacks <|endoftext|> or <|im_end|>" % args.tokenizer_dir)
    log("tokenizer %s: vocab %d" % (args.tokenizer_dir, vocab))
    workers = max(1, min(16, os.cpu_count() or 1))
    chat, text, vchat, vtext, val_docs, entries, chapters = load_data(args, tok, workers)
    bench_prompts(args, tok, val_docs, entries, chapters)

    import torch
    if not torch.cuda.is_available():
        sys.exit("train_qwen3_5_mtp: needs a CUDA device")
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    model, head = build(args, vocab, [im_end, eot], eot, dev)
    n_trunk = sum(p.numel() for p in model.parameters())
    n_head = sum(p.numel() for p in head.parameters())
    log("model: trunk %d parameters (%s), MTP head %d, attention %s"
        % (n_trunk, " ".join("L" if t == "linear_attention" else "F" for t in model.config.layer_types),
           n_head, getattr(model.config, "_attn_implementation", "?")))
    history, seconds, steps = train(args, model, head, (chat, text, vchat, vtext), dev)
    log("trained %d steps in %.0f s" % (steps, seconds))

    checks = {}
    save(args, model, head, args.tokenizer_dir)
    info = {"trunk_params": n_trunk, "mtp_params": n_head, "steps": steps, "train_seconds": round(seconds, 1),
            "vocab": vocab, "layer_types": list(model.config.layer_types)}
    final = {}
    try:
        rmodel, rhead = reload_checks(args, dev, checks)
        layer_parity(rmodel, rhead, dev, checks)
        import numpy as np

        def gi(a):
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)
        # float32 arithmetic on the reloaded bf16 weights
        full = {"chat": (gi(vchat[0][:256]), gi(vchat[1][:256])), "text": (gi(vtext[0][:256]), gi(vtext[1][:256]))}
        final = evaluate(rmodel, rhead, full, bs=8, amp=False)
        log("FINAL held-out (saved bf16 weights): %s" % fmt_eval(final))
        for k, v in final.items():
            log("  %-5s trunk loss %.4f (ppl %.2f)  MTP loss %.4f  MTP top-1 %.1f%%  MTP argmax = trunk argmax %.1f%%"
                % (k, v["trunk_loss"], math.exp(v["trunk_loss"]), v["mtp_loss"], 100 * v["mtp_top1"],
                   100 * v["mtp_agrees_with_trunk"]))
        write_mtp_reference(args, rmodel, rhead, tok, dev)
        del rmodel, rhead
    except Exception as e:  # noqa: BLE001 - the checkpoint is written; report and go on
        import traceback
        traceback.print_exc()
        checks["reload_error"] = repr(e)
    try:
        from demo_reference import write_reference
        write_reference(args.out, os.path.join(args.out, "reference_logits.json"))
        log("reference_logits.json written")
    except Exception as e:  # noqa: BLE001
        checks["reference_logits_error"] = repr(e)
        log("reference logits failed: %r" % (e,))
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump({"info": info, "final": final, "history": history, "checks": checks, "args": vars(args)},
                  f, indent=1, default=str)
    log("checks: %s" % checks)
    log("done: %s" % {f: os.path.getsize(os.path.join(args.out, f)) for f in sorted(os.listdir(args.out))})
    log("next: bench/mtp_acceptance.sh %s   (ember bench --spec mtp on the CPU, K = 1, 2, 3)" % args.out)


if __name__ == "__main__":
    main()
