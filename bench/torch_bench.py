#!/usr/bin/env python3
"""torch_bench.py — the PyTorch side of bench/gpu_bench.sh, on one CUDA GPU.

  torch_bench.py hw --out FILE.json
      streaming-read bandwidth (a sum over a 4 GiB tensor, and a 2 GiB copy) and
      bf16 GEMM TFLOP/s (torch.matmul, 8192^3 by default)

  torch_bench.py model MODEL_DIR --out FILE.jsonl [--gen-tokens 32] [--prompt 512] [--prefill 512,4096]
      the model of MODEL_DIR/config.json in transformers, bf16, weights initialised
      on the GPU (the figures depend on shapes, not values; nothing is read from disk):
      prefill tokens/s (one forward over N tokens, logits of the last row only),
      batch-1 greedy decode tokens/s after a --prompt-token prompt: the forward
      called step by step on a static cache (eager, then torch.compile with CUDA
      graphs), and generate() (static cache, else the dynamic one) as well; where
      the step loop fails, generate()'s torch.compile instead.
      One JSON object per measurement is appended to FILE as soon as it is known,
      so a run stopped by a timeout keeps what it measured.

Needs torch and transformers; prints progress to stderr.
"""
import argparse
import json
import os
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a):
    print("[torch_bench]", *a, file=sys.stderr, flush=True)


def emit(path, obj):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
    log(json.dumps(obj))


def timed(fn, reps, warmup=1):
    """Best wall time of fn over reps runs, CUDA-synchronised."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


# ---------------------------------------------------------------- hardware

def hw(args):
    import torch
    dev = torch.device("cuda")
    res = {"kind": "hw", "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    n = (4 << 30) // 4
    x = torch.ones(n, dtype=torch.float32, device=dev)
    t = timed(lambda: x.sum(), 10, warmup=3)
    res["read_gbs"] = round(n * 4 / t / 1e9, 1)
    del x
    m = (2 << 30) // 2
    a = torch.empty(m, dtype=torch.bfloat16, device=dev)
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), 10, warmup=3)
    res["copy_gbs"] = round(2 * m * 2 / t / 1e9, 1)  # read + write
    del a, b
    torch.cuda.empty_cache()
    s = args.gemm
    p = torch.randn(s, s, dtype=torch.bfloat16, device=dev)
    q = torch.randn(s, s, dtype=torch.bfloat16, device=dev)
    reps = 20
    t = timed(lambda: [torch.matmul(p, q) for _ in range(reps)], 3, warmup=1)
    res["gemm_n"] = s
    res["gemm_tflops"] = round(2 * s ** 3 * reps / t / 1e12, 1)
    emit(args.out, res)


# ---------------------------------------------------------------- models

def step_clock():
    """A logits processor that records when each decode step's logits are ready."""
    import torch
    from transformers import LogitsProcessor

    class StepClock(LogitsProcessor):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter())
            return scores
    return StepClock()


def load_model(model_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(model_dir)
    cfg.use_cache = True
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model = model.to("cuda", torch.bfloat16).eval()
    return model, cfg


def weight_bytes(model):
    """Bytes a decode step reads: every weight once; an untied embedding table only as one row."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    if out is not None and out.weight.data_ptr() != emb.data_ptr():
        total -= emb.numel() * emb.element_size()
    return total


def decode(model, vocab, n_prompt, n_gen, mode):
    """Greedy decode tokens/s (steps 2..n_gen) after an n_prompt-token prompt.
    mode: "compile" (static cache, generate's torch.compile), "static" (static
    cache, eager) or "dynamic" (the default cache, eager)."""
    import torch
    from transformers import LogitsProcessorList
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(3, vocab, (1, n_prompt), generator=g).to("cuda")
    kw = dict(max_new_tokens=n_gen, min_new_tokens=n_gen, do_sample=False, attention_mask=torch.ones_like(ids),
              pad_token_id=0)
    if mode in ("compile", "static"):
        kw["cache_implementation"] = "static"
    if mode != "compile":
        kw["disable_compile"] = True
    times = None
    for _ in range(2):  # the first run compiles / warms up
        clock = step_clock()
        with torch.no_grad():
            try:
                out = model.generate(ids, logits_processor=LogitsProcessorList([clock]), **kw)
            except (TypeError, ValueError) as e:
                if "disable_compile" not in str(e):
                    raise
                kw.pop("disable_compile")  # a version without the switch: it compiles nothing itself
                clock = step_clock()
                out = model.generate(ids, logits_processor=LogitsProcessorList([clock]), **kw)
        if out.shape[1] != n_prompt + n_gen:
            raise RuntimeError("generated %d tokens, wanted %d" % (out.shape[1] - n_prompt, n_gen))
        times = clock.times
    if len(times) < 2:
        raise RuntimeError("too few decode steps timed")
    compiled = mode == "compile" and hasattr(model, "_compiled_call")
    return (len(times) - 1) / (times[-1] - times[0]), compiled


def static_cache(cfg, length):
    """A StaticCache of `length` positions for batch 1, whatever this transformers' constructor asks."""
    import inspect
    import torch
    from transformers import StaticCache
    params = inspect.signature(StaticCache.__init__).parameters
    kw = {"config": cfg, "max_cache_len": length}
    for k, v in (("max_batch_size", 1), ("batch_size", 1), ("device", "cuda"), ("dtype", torch.bfloat16)):
        if k in params:
            kw[k] = v
    return StaticCache(**kw)


def decode_loop(model, cfg, vocab, n_prompt, n_gen, compiled):
    """Greedy decode tokens/s with the model's forward called step by step on a static cache,
    the next id chosen on the GPU and nothing synchronised until the end (as a serving loop
    runs it; generate() adds its own per-step host work). compiled: the forward through
    torch.compile(mode="reduce-overhead"), i.e. replayed as CUDA graphs. The first quarter
    of the steps (at least 3) warm up and are not timed."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(3, vocab, (1, n_prompt), generator=g).to("cuda")
    cache = static_cache(cfg, n_prompt + n_gen + 1)
    fwd = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True) if compiled else model.forward
    warm = max(3, n_gen // 4)
    if n_gen - warm < 2:
        raise RuntimeError("too few decode steps to time (--gen-tokens)")
    with torch.inference_mode():
        out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(n_prompt, device="cuda"),
                    use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1:].argmax(-1)
        t0 = None
        for i in range(n_gen):
            if i == warm:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            pos = torch.full((1,), n_prompt + i, dtype=torch.long, device="cuda")
            out = fwd(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1).clone()
        torch.cuda.synchronize()
    return (n_gen - warm) / (time.perf_counter() - t0)


def model_bench(args):
    import torch
    name = os.path.basename(os.path.normpath(args.model_dir))
    base = {"kind": "torch", "model": name, "dir": args.model_dir}
    try:
        import transformers
        base["transformers"] = transformers.__version__
        t = time.time()
        model, cfg = load_model(args.model_dir)
        base["load_s"] = round(time.time() - t, 1)
        base["class"] = type(model).__name__
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        emit(args.out, dict(base, what="load", error=repr(e)[:300]))
        return
    vocab = cfg.vocab_size
    emit(args.out, dict(base, what="weights", bytes_per_token=weight_bytes(model),
                        params=sum(p.numel() for p in model.parameters())))
    for n in [int(x) for x in args.prefill.split(",") if x]:
        try:
            g = torch.Generator(device="cpu").manual_seed(n)
            ids = torch.randint(3, vocab, (1, n), generator=g).to("cuda")

            def fwd():
                with torch.no_grad():
                    model(input_ids=ids, use_cache=False, logits_to_keep=1)
            t = timed(fwd, args.repeat, warmup=1)
            emit(args.out, dict(base, what="prefill", tokens=n, tps=round(n / t, 1), mode="eager"))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            emit(args.out, dict(base, what="prefill", tokens=n, error=repr(e)[:300]))
        torch.cuda.empty_cache()
    # decode: eager first (always kept), then compiled; the step loop where the
    # model takes a static cache, else generate()
    notes = []
    try:
        tps = decode_loop(model, cfg, vocab, args.prompt, args.gen_tokens, False)
        emit(args.out, dict(base, what="decode", mode="loop", tps=round(tps, 2), prompt=args.prompt,
                            gen=args.gen_tokens))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        notes.append("step loop failed: %s" % repr(e)[:160])
    for mode in ("static", "dynamic"):
        try:
            tps, _ = decode(model, vocab, args.prompt, args.gen_tokens, mode)
            emit(args.out, dict(base, what="decode", mode=mode, tps=round(tps, 2), prompt=args.prompt,
                                gen=args.gen_tokens, note="; ".join(notes)))
            break
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            notes.append("%s cache failed: %s" % (mode, repr(e)[:160]))
    else:
        emit(args.out, dict(base, what="decode", mode="eager", error="; ".join(notes)))
        return
    if args.no_compile:
        return
    try:
        t = time.time()
        tps = decode_loop(model, cfg, vocab, args.prompt, args.gen_tokens, True)
        emit(args.out, dict(base, what="decode", mode="loop-compile", tps=round(tps, 2), prompt=args.prompt,
                            gen=args.gen_tokens, seconds=round(time.time() - t, 1)))
        return
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        emit(args.out, dict(base, what="decode", mode="loop-compile", error=repr(e)[:300]))
    try:
        t = time.time()
        tps, compiled = decode(model, vocab, args.prompt, args.gen_tokens, "compile")
        emit(args.out, dict(base, what="decode", mode="compile" if compiled else "static-auto", tps=round(tps, 2),
                            prompt=args.prompt, gen=args.gen_tokens, seconds=round(time.time() - t, 1),
                            note="" if compiled else "generate did not compile the forward"))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        emit(args.out, dict(base, what="decode", mode="compile", error=repr(e)[:300]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hw")
    h.add_argument("--out", required=True)
    h.add_argument("--gemm", type=int, default=8192)
    m = sub.add_parser("model")
    m.add_argument("model_dir")
    m.add_argument("--out", required=True)
    m.add_argument("--gen-tokens", type=int, default=32)
    m.add_argument("--prompt", type=int, default=512)
    m.add_argument("--prefill", default="512,4096")
    m.add_argument("--repeat", type=int, default=3)
    m.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "model" and (args.gen_tokens < 2 or args.prompt < 1):
        ap.error("--gen-tokens must be at least 2 and --prompt at least 1")
    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_bench: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    hw(args) if args.cmd == "hw" else model_bench(args)


if __name__ == "__main__":
    main()
