#!/usr/bin/env python3
"""Makes small random-weight Qwen3.5 checkpoints (hybrid Gated DeltaNet + gated
attention) with transformers, saved in bf16 as transformers saves them, and
records reference outputs computed in float64 from those bf16 weights:

  <out>/<name>/config.json, model.safetensors, generation_config.json
  <out>/<name>/ref.json     {"ids": [...], "greedy": [...], "n_new": N, ...}
  <out>/<name>/logits.bin   float32 little-endian [len(ids), vocab]

Variants cover hidden sizes, head counts, key/value head ratios of the linear
layers, conv kernels, partial rotary factors, tied and untied heads, attention
biases, and sequences crossing the 64-token chunk boundary of the chunked
delta rule several times. One checkpoint carries an MTP head (mtp.* tensors,
random, as the released checkpoints ship them; transformers does not run it,
so it has no reference output), and one is saved through the vision-language
wrapper (Qwen3_5ForConditionalGeneration with a tiny vision tower), which
writes the model.language_model.* / model.visual.* layout.

The reference is computed on the CPU: no fused kernels, the torch fallbacks of
the chunked and recurrent delta rules.

Run on a machine with torch + transformers:  python3 make_qwen3_5_goldens.py OUT
"""
import json, os, sys, traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers
from transformers import AutoModelForCausalLM

N_NEW = 12

# name, text config overrides, sequence length, extras
VARIANTS = [
    ("q35_tied_ratio2", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, vocab_size=256, tie_word_embeddings=True,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"]),
        0.25, 150, {}),
    ("q35_mtp_ratio3", dict(hidden_size=96, intermediate_size=192, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, head_dim=48, linear_num_key_heads=1,
        linear_num_value_heads=3, linear_key_head_dim=32, linear_value_head_dim=24,
        linear_conv_kernel_dim=3, vocab_size=320, tie_word_embeddings=False,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"]),
        0.5, 150, {"mtp": 1}),
    ("q35_equal_heads_bias", dict(hidden_size=128, intermediate_size=160, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, linear_num_key_heads=4,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=32,
        linear_conv_kernel_dim=2, vocab_size=288, tie_word_embeddings=True, attention_bias=True,
        layer_types=["full_attention", "linear_attention", "linear_attention"]),
        1.0, 200, {}),
    ("q35_vl_layout", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, vocab_size=256, tie_word_embeddings=False),
        0.25, 140, {"vl": True}),
]


def text_config(over, partial, theta):
    from transformers import Qwen3_5TextConfig
    kw = dict(over)
    kw.update(max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
              pad_token_id=None, hidden_act="silu")
    rope = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": partial}
    try:
        return Qwen3_5TextConfig(rope_parameters=rope, partial_rotary_factor=partial, **kw)
    except Exception as e:  # noqa: BLE001 - the factor given once only
        print("config retry without the partial_rotary_factor kwarg:", e, flush=True)
        return Qwen3_5TextConfig(rope_parameters=rope, **kw)


def randomize(model):
    """Random init wide enough for useful logits; decays spread from slow to fast."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "visual" in n:
                p.normal_(0.0, 0.05)
            elif n.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.02, 2.0).log())
            elif n.endswith("dt_bias"):
                p.normal_(0.0, 0.5)
            elif "conv1d" in n:
                p.normal_(0.0, 0.5)
            elif n.endswith("linear_attn.norm.weight"):  # gated norm: plain gain
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "norm" in n:  # zero-centred gains: x * (1 + w)
                p.normal_(0.0, 0.1)
            elif p.dim() >= 2:
                p.normal_(0.0, 0.08)
            else:
                p.normal_(0.0, 0.05)


def mtp_tensors(cfg, n_layers, gen):
    """MTP head tensors in the released checkpoints' naming (bf16)."""
    H, F, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads

    def mat(r, c):
        return (torch.randn(r, c, generator=gen) * 0.08).to(torch.bfloat16)

    def gain(n):
        return (torch.randn(n, generator=gen) * 0.1).to(torch.bfloat16)

    t = {"mtp.fc.weight": mat(H, 2 * H), "mtp.pre_fc_norm_embedding.weight": gain(H),
         "mtp.pre_fc_norm_hidden.weight": gain(H), "mtp.norm.weight": gain(H)}
    for i in range(n_layers):
        p = f"mtp.layers.{i}."
        t[p + "input_layernorm.weight"] = gain(H)
        t[p + "post_attention_layernorm.weight"] = gain(H)
        t[p + "self_attn.q_proj.weight"] = mat(2 * nh * hd, H)
        t[p + "self_attn.k_proj.weight"] = mat(nkv * hd, H)
        t[p + "self_attn.v_proj.weight"] = mat(nkv * hd, H)
        t[p + "self_attn.o_proj.weight"] = mat(H, nh * hd)
        t[p + "self_attn.q_norm.weight"] = gain(hd)
        t[p + "self_attn.k_norm.weight"] = gain(hd)
        t[p + "mlp.gate_proj.weight"] = mat(F, H)
        t[p + "mlp.up_proj.weight"] = mat(F, H)
        t[p + "mlp.down_proj.weight"] = mat(H, F)
    return t


def add_mtp(d, cfg, n_layers, seed):
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    w = load_file(path)
    w.update(mtp_tensors(cfg, n_layers, torch.Generator().manual_seed(seed)))
    save_file(w, path, metadata={"format": "pt"})
    cpath = os.path.join(d, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    c["mtp_num_hidden_layers"] = n_layers
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2)


def build(name, over, partial, seq_len, extra, i, out):
    theta = 10000.0 if i % 2 == 0 else 1000000.0
    tcfg = text_config(over, partial, theta)
    torch.manual_seed(300 + i)
    d = os.path.join(out, name)
    if extra.get("vl"):
        from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3,
                      patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
                      out_hidden_size=tcfg.hidden_size, num_position_embeddings=16)
        cfg = Qwen3_5Config(text_config=tcfg.to_dict(), vision_config=vision,
                            tie_word_embeddings=tcfg.tie_word_embeddings)
        model = Qwen3_5ForConditionalGeneration(cfg).to(torch.float32)
        cls = Qwen3_5ForConditionalGeneration
    else:
        model = AutoModelForCausalLM.from_config(tcfg).to(torch.float32)
        cls = AutoModelForCausalLM
    randomize(model)
    model = model.to(torch.bfloat16)
    model.save_pretrained(d, safe_serialization=True)
    if extra.get("mtp"):
        add_mtp(d, tcfg, extra["mtp"], 900 + i)
    # Reference: f64 from the saved bf16 weights, loaded as a user loads them
    # (converting the in-memory model would round the rotary inv_freq to bf16).
    ref = cls.from_pretrained(d, dtype=torch.float64).eval()
    g = torch.Generator().manual_seed(17 + i)
    ids = torch.randint(3, tcfg.vocab_size, (1, seq_len), generator=g)
    with torch.no_grad():
        logits = ref(input_ids=ids).logits[0].to(torch.float32).numpy()
        seq = ids
        for _ in range(N_NEW):  # greedy, no EOS stop, full recompute each step
            nxt = ref(input_ids=seq).logits[0, -1].argmax().view(1, 1)
            seq = torch.cat([seq, nxt], dim=1)
    greedy = seq[0, seq_len:].tolist()
    info = {}
    try:
        lm = ref.model.language_model if extra.get("vl") else ref.model
        info = {"inv_freq": [float(v) for v in lm.rotary_emb.inv_freq.tolist()],
                "layer_types": list(lm.config.layer_types),
                "rope_parameters": {k: v for k, v in lm.config.rope_parameters.items()}}
    except Exception as e:  # noqa: BLE001
        info = {"error": str(e)}
    logits.astype("<f4").tofile(os.path.join(d, "logits.bin"))
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump({"ids": ids[0].tolist(), "greedy": greedy, "n_new": N_NEW, "model": info,
                   "mtp_layers": extra.get("mtp", 0), "layout": "vl" if extra.get("vl") else "text",
                   "transformers": transformers.__version__, "torch": torch.__version__}, f)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(name, "ok", logits.shape, "greedy", greedy, "bytes", size, flush=True)


def dump_sources(out):
    import inspect, shutil
    src = os.path.join(out, "_sources")
    os.makedirs(src, exist_ok=True)
    for mod in ("modeling_qwen3_5", "configuration_qwen3_5"):
        try:
            m = __import__("transformers.models.qwen3_5." + mod, fromlist=[mod])
            shutil.copy(inspect.getsourcefile(m), os.path.join(src, mod + ".py"))
        except Exception as e:  # noqa: BLE001
            print("source dump failed", mod, e, flush=True)
    try:
        import transformers.cache_utils as cu
        shutil.copy(inspect.getsourcefile(cu), os.path.join(src, "cache_utils.py"))
    except Exception as e:  # noqa: BLE001
        print("source dump failed cache_utils", e, flush=True)


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(8)
    dump_sources(out)
    only = sys.argv[2:]
    for i, (name, over, partial, seq_len, extra) in enumerate(VARIANTS):
        if only and name not in only:
            continue
        try:
            build(name, over, partial, seq_len, extra, i, out)
        except Exception:  # noqa: BLE001 - one failure must not lose the others
            print("FAILED", name, flush=True)
            traceback.print_exc()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "goldens")
