#!/usr/bin/env python3
"""demo_reference.py — reference logits of the demo model, for ember's parity test.

Loads MODEL_DIR with transformers in float32 (the bf16 weights upcast), renders two
fixed prompts (a chat turn through the model's own chat template, and plain text),
and writes OUT_JSON with, for each prompt: the token ids (from tokenizer.json via
the tokenizers library), the top-5 logits at every position, the full logits of the
last position (rounded to 1e-4) and 24 greedily decoded token ids.

Usage: demo_reference.py MODEL_DIR OUT_JSON      (needs torch, transformers, tokenizers)
"""
import json
import os
import sys

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "Name of the city, e.g. Paris"}},
        "required": ["city"]}}}


def cases(model_dir):
    msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
    try:
        from transformers import AutoTokenizer
        hf_tok = AutoTokenizer.from_pretrained(model_dir)
        chat = hf_tok.apply_chat_template(msgs, tools=[WEATHER_TOOL], add_generation_prompt=True,
                                          tokenize=False)
    except Exception:  # render the template the way transformers configures jinja2
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_demo"))
        import render
        with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
            tpl = render.compile_template(json.load(f)["chat_template"])
        chat = render.render(tpl, msgs, [WEATHER_TOOL], add_generation_prompt=True)
    return [("chat_tool_prompt", chat), ("plain_text", "In the beginning God created the heaven")]


def write_reference(model_dir, out_path, device=None):
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    # Full float32 matmuls: TF32 would move logits by ~1e-2 on this model.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(dev).eval()
    with open(os.path.join(model_dir, "generation_config.json")) as f:
        eos = json.load(f)["eos_token_id"]
    out = {"model_dir": os.path.basename(os.path.normpath(model_dir)), "dtype": "float32",
           "note": "bf16 weights upcast to float32; logits from transformers", "cases": []}
    for name, text in cases(model_dir):
        ids = tok.encode(text, add_special_tokens=False).ids
        x = torch.tensor([ids], device=dev)
        with torch.no_grad():
            logits = model(input_ids=x).logits[0].float()
            top = torch.topk(logits, 5, dim=-1)
            gen = model.generate(x, max_new_tokens=24, do_sample=False, eos_token_id=eos,
                                 pad_token_id=eos[-1], attention_mask=torch.ones_like(x))
        out["cases"].append({
            "name": name, "text": text, "ids": ids,
            "top5_ids": top.indices.tolist(),
            "top5_logits": [[round(v, 4) for v in row] for row in top.values.tolist()],
            "last_logits": [round(v, 4) for v in logits[-1].tolist()],
            "greedy_ids": gen[0, len(ids):].tolist(),
        })
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write_reference(sys.argv[1], sys.argv[2])
