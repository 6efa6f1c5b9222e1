#!/usr/bin/env python3
"""Makes small random-weight checkpoints of the Llama family (llama, mistral,
qwen2, qwen3) with transformers, saved in bf16 as transformers saves them, and
records reference outputs computed in float64 from those bf16 weights:

  <out>/<name>/config.json, model.safetensors, generation_config.json
  <out>/<name>/ref.json     {"ids": [...], "greedy": [...], "n_new": N}
  <out>/<name>/logits.bin   float32 little-endian [len(ids), vocab]

Run on a machine with torch + transformers:  python3 make_dense_goldens.py OUT
"""
import json, os, sys
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

VARIANTS = [
    # name, model_type, config overrides, rope parameters (None = default)
    ("llama_gqa_tied", "llama", dict(hidden_size=128, intermediate_size=320, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True), None),
    ("llama_hd48_llama3_bias", "llama", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=48, vocab_size=384, tie_word_embeddings=False,
        attention_bias=True, mlp_bias=True),
        dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
             original_max_position_embeddings=64)),
    ("llama_yarn_mha", "llama", dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2,
        num_attention_heads=3, num_key_value_heads=3, vocab_size=300, tie_word_embeddings=False),
        dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32)),
    ("llama_linear", "llama", dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, vocab_size=256, tie_word_embeddings=True),
        dict(rope_type="linear", factor=2.0)),
    ("mistral_window", "mistral", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=40, vocab_size=400, sliding_window=7,
        tie_word_embeddings=False), None),
    ("qwen2_bias", "qwen2", dict(hidden_size=96, intermediate_size=224, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, vocab_size=320, tie_word_embeddings=True), None),
    ("qwen3_qknorm", "qwen3", dict(hidden_size=64, intermediate_size=192, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=352, tie_word_embeddings=False), None),
    ("qwen3_yarn_gqa4", "qwen3", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, vocab_size=288, tie_word_embeddings=True),
        dict(rope_type="yarn", factor=2.0, original_max_position_embeddings=64, beta_fast=16.0, beta_slow=2.0)),
]

SEQ_LEN = 24
N_NEW = 12


def make_config(model_type, over, rope, theta):
    kw = dict(over)
    kw.update(max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              pad_token_id=None)
    params = {"rope_type": "default", "rope_theta": theta}
    if rope:
        params.update(rope)
    try:
        return AutoConfig.for_model(model_type, rope_parameters=params, **kw)
    except TypeError:
        scaling = dict(rope) if rope else None
        return AutoConfig.for_model(model_type, rope_theta=theta, rope_scaling=scaling, **kw)


def main(out):
    torch.manual_seed(1234)
    os.makedirs(out, exist_ok=True)
    for i, (name, mt, over, rope) in enumerate(VARIANTS):
        cfg = make_config(mt, over, rope, theta=10000.0 if i % 2 == 0 else 500000.0)
        torch.manual_seed(100 + i)
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
        # Random init is small; widen it so logits have a useful range.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, 0.08)
                elif "norm" in n:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, 0.05)
        model = model.to(torch.bfloat16)
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        # Reference: f64 computed from the saved bf16 weights, loaded the way a
        # user loads them (converting the in-memory model instead would also
        # round the rotary inv_freq buffer to bf16).
        ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64).eval()
        g = torch.Generator().manual_seed(7 + i)
        ids = torch.randint(3, cfg.vocab_size, (1, SEQ_LEN), generator=g)
        with torch.no_grad():
            logits = ref(ids).logits[0].to(torch.float32).numpy()
            seq = ids
            for _ in range(N_NEW):  # greedy, no EOS stop (ids are compared raw)
                nxt = ref(seq).logits[0, -1].argmax().view(1, 1)
                seq = torch.cat([seq, nxt], dim=1)
        greedy = seq[0, SEQ_LEN:].tolist()
        rot = {}
        try:  # the reference rotary tables, to localise rope mismatches
            re_ = ref.model.rotary_emb
            rot = {"inv_freq": [float(v) for v in re_.inv_freq.tolist()],
                   "attention_scaling": float(re_.attention_scaling)}
        except Exception as e:  # noqa: BLE001
            rot = {"error": str(e)}
        logits.astype("<f4").tofile(os.path.join(d, "logits.bin"))
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump({"ids": ids[0].tolist(), "greedy": greedy, "n_new": N_NEW, "rotary": rot,
                       "transformers": transformers.__version__, "torch": torch.__version__}, f)
        print(name, "ok", logits.shape, "greedy", greedy, flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "goldens")
