#!/usr/bin/env bash
# gpu_bench.sh — ember against PyTorch on one CUDA GPU, in one run.
#
#   bench/gpu_bench.sh EMBER_BIN WORK_DIR [--with-8b] [--gen-tokens N] [--no-torch]
#                      [--no-compile] [--peak-tflops T] [--device cuda] [--shapes "A B"]
#                      [--batches "8 32"]
#
# Makes random-weight checkpoints of real shapes with bench/make_random_model.py
# (llama-3.2-1b, qwen3.5-4b; llama-3.1-8b with --with-8b) in WORK_DIR (kept: a
# second run reuses them), a 4-bit group-64 quantization of each with
# `ember quantize`, then for every model x format:
#   ember    `ember bench --device cuda --json`: batch-1 decode tokens/s after a
#            512-token prompt and its HBM roofline fraction (weight bytes per
#            token / the roofline bandwidth below), prefill tokens/s at
#            512 and 4096 tokens (each prompt as one forward, --prefill-chunk, as
#            torch runs it) and their fraction of the bf16 tensor-core peak;
#            then decode of B sequences together for each B of --batches
#            (default "8 32"; "" for none) after 64-token prompts: tokens/s of
#            all sequences and each step's weight bytes against the roofline
#   torch    bench/torch_bench.py: transformers, bf16, the same figures; decode
#            as a step loop over a static cache, eager and under torch.compile
#            (CUDA graphs), and through generate() (the table takes the best)
# and, measured in the same run, a streaming-read bandwidth and a bf16 GEMM
# (torch.matmul 8192^3) TFLOP/s. The roofline bandwidth, for both engines'
# rows, is the highest streaming read of the run (torch's, or the read probe
# each ember bench runs). --shapes replaces the list of shapes (e.g. "tiny"
# for a quick check of the script). Rows that cannot run say why. Prints a
# markdown table at the end (also WORK_DIR/table.md; raw results in
# WORK_DIR/results.jsonl).
#
# Prefill FLOPs per token = 2 x the matrix parameters of the trunk (the head
# runs on the last row only) + 4 x n_heads x head_dim x N/2 per full-attention
# layer (causal scores and values over N tokens); the Gated DeltaNet recurrence
# of Qwen3.5 is left out. The peak is the bf16 GEMM measured in the same run
# (torch.matmul 8192^3, cuBLASLt underneath), or --peak-tflops T (e.g. 989, the
# H200's dense bf16 data-sheet figure); without torch and without the option,
# the data-sheet figure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
ember=$1 work=$2; shift 2
with8b=0 gen=64 torch=1 compile=1 peak=0 device=cuda shapes_arg="" batches="8 32"
while [ $# -gt 0 ]; do
  case $1 in
    --with-8b) with8b=1 ;;
    --gen-tokens) gen=${2:?}; shift ;;
    --no-torch) torch=0 ;;
    --no-compile) compile=0 ;;
    --peak-tflops) peak=${2:?}; shift ;;
    --device) device=${2:?}; shift ;;
    --shapes) shapes_arg=${2:?}; shift ;;
    --batches) batches=${2?}; shift ;;
    -h|--help) usage ;;
    *) echo "gpu_bench: unknown option $1" >&2; usage ;;
  esac
  shift
done
[ -x "$ember" ] || { echo "gpu_bench: $ember is not an executable" >&2; exit 2; }
mkdir -p "$work" || exit 2
work=$(cd "$work" && pwd)
res="$work/results.jsonl"
: >"$res"
t_start=$(date +%s)
say() { printf '[%4ds] %s\n' $(($(date +%s) - t_start)) "$*"; }
# a JSON line into the results: kind, model, format, then key=value pairs (strings)
note() { python3 - "$res" "$@" <<'PY'
import json, sys
path, kind, model, fmt = sys.argv[1:5]
obj = {"kind": kind, "model": model, "format": fmt}
for kv in sys.argv[5:]:
    k, _, v = kv.partition("=")
    obj[k] = v
open(path, "a").write(json.dumps(obj) + "\n")
PY
}

shapes=(llama-3.2-1b qwen3.5-4b)
[ $with8b = 1 ] && shapes+=(llama-3.1-8b)
[ -n "$shapes_arg" ] && read -r -a shapes <<<"$shapes_arg"
say "ember $("$ember" --version 2>/dev/null | head -1); work $work; shapes ${shapes[*]}; device $device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'

# 1. hardware figures, measured first (nothing else on the GPU)
if [ $torch = 1 ]; then
  say "torch: streaming-read bandwidth and bf16 GEMM"
  timeout 120 python3 "$here/torch_bench.py" hw --out "$res" || note hw - - "error=torch_bench hw failed (exit $?)"
fi

# 2. checkpoints: bf16 random weights, then ember's 4-bit group-64 quantization
for s in "${shapes[@]}"; do
  d="$work/$s"
  if [ ! -f "$d/bf16/model.safetensors" ]; then
    say "making $s (bf16, random weights)"
    python3 "$here/make_random_model.py" "$d/bf16" --shape "$s" >/dev/null || { note ember "$s" bf16 "error=make_random_model failed"; continue; }
  fi
  if [ ! -f "$d/q4g64/config.json" ]; then
    say "quantizing $s to 4 bits, groups of 64"
    if ! out=$("$ember" quantize "$d/bf16" "$d/q4g64" --bits 4 --group-size 64 --force 2>&1); then
      note ember "$s" q4g64 "error=ember quantize: $(tail -2 <<<"$out" | tr '\n' ' ')"
    fi
  fi
done

# 3. ember on the device: decode after 512 tokens (and prefill 512), then prefill 4096
for s in "${shapes[@]}"; do
  for f in bf16 q4g64; do
    d="$work/$s/$f"
    [ -f "$d/config.json" ] || continue
    say "ember bench $s $f"
    if out=$(timeout 240 "$ember" bench "$d" --device "$device" --prompt-tokens 512 --prefill-chunk 512 --gen-tokens "$gen" --json 2>&1); then
      grep '^{' <<<"$out" | head -1 | python3 -c "import json,sys; o=json.loads(sys.stdin.read()); o.update(kind='ember', model='$s', format='$f', what='decode512'); print(json.dumps(o))" >>"$res" \
        || note ember "$s" "$f" "error=unreadable bench output: $(tail -c 300 <<<"$out" | tr '\n' ' ')"
    else
      note ember "$s" "$f" "error=$(grep -v '^{' <<<"$out" | tail -2 | tr '\n' ' ' | cut -c1-300)"
      continue
    fi
    if out=$(timeout 240 "$ember" bench "$d" --device "$device" --prompt-tokens 4096 --prefill-chunk 4096 --gen-tokens 1 --json 2>&1); then
      grep '^{' <<<"$out" | head -1 | python3 -c "import json,sys; o=json.loads(sys.stdin.read()); o.update(kind='ember', model='$s', format='$f', what='prefill4096'); print(json.dumps(o))" >>"$res" \
        || note ember "$s" "$f" "what=prefill4096" "error=unreadable bench output"
    else
      note ember "$s" "$f" "what=prefill4096" "error=$(grep -v '^{' <<<"$out" | tail -2 | tr '\n' ' ' | cut -c1-300)"
    fi
  done
done

# 3b. ember's batched decode: B sequences a step, after 64-token prompts
for s in "${shapes[@]}"; do
  for f in bf16 q4g64; do
    d="$work/$s/$f"
    [ -f "$d/config.json" ] || continue
    for b in $batches; do
      say "ember bench $s $f --batch $b"
      if out=$(timeout 240 "$ember" bench "$d" --device "$device" --prompt-tokens 64 --gen-tokens "$gen" --batch "$b" --json 2>&1); then
        grep '^{' <<<"$out" | head -1 | python3 -c "import json,sys; o=json.loads(sys.stdin.read()); o.update(kind='ember', model='$s', format='$f', what='decode_batch'); print(json.dumps(o))" >>"$res" \
          || note ember "$s" "$f" "what=decode_batch" "batch=$b" "error=unreadable bench output"
      else
        note ember "$s" "$f" "what=decode_batch" "batch=$b" "error=$(grep -v '^{' <<<"$out" | tail -2 | tr '\n' ' ' | cut -c1-300)"
      fi
    done
  done
done

# 4. PyTorch, the same shapes (bf16)
if [ $torch = 1 ]; then
  for s in "${shapes[@]}"; do
    [ -f "$work/$s/bf16/config.json" ] || continue
    say "torch $s (transformers, bf16)"
    extra=(); [ $compile = 1 ] || extra=(--no-compile)
    tmp="$work/$s/torch.jsonl"; : >"$tmp"
    timeout 300 python3 "$here/torch_bench.py" model "$work/$s/bf16" --out "$tmp" --gen-tokens "$gen" "${extra[@]}"
    rc=$?
    python3 -c "
import json,sys
for l in open('$tmp'):
    o=json.loads(l); o['model']='$s'; o['format']='bf16'; print(json.dumps(o))" >>"$res"
    [ $rc = 0 ] || note torch "$s" bf16 "what=run" "error=torch_bench exited $rc$([ $rc = 124 ] && echo ' (timed out; rows above are what it measured)')"
  done
fi

say "done; summary"
python3 - "$res" "$work" "$peak" <<'PY' | tee "$work/table.md"
import json, os, struct, sys
res, work, peak = sys.argv[1], sys.argv[2], float(sys.argv[3]) * 1e12
rows = [json.loads(l) for l in open(res) if l.strip()]
hw = next((r for r in rows if r.get("kind") == "hw" and "read_gbs" in r), None)
if peak <= 0:  # the GEMM measured in this run, else the data sheet's dense bf16 figure
    peak = hw["gemm_tflops"] * 1e12 if hw else 989e12

def shapes_of(d):
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {k: v["shape"] for k, v in h.items() if k != "__metadata__"}

def flops_per_token(model, n):
    """2 x trunk matrix parameters + causal attention over n tokens."""
    d = os.path.join(work, model, "bf16")
    try:
        cfg = json.load(open(os.path.join(d, "config.json")))
        sh = shapes_of(d)
    except Exception:
        return None
    mat = 0
    for k, s in sh.items():
        if len(s) == 2 and k.startswith("model.layers."):
            mat += s[0] * s[1]
    L = cfg["num_hidden_layers"]
    if cfg.get("model_type") == "qwen3_5_text":
        iv = cfg.get("full_attention_interval", 4)
        full = sum(1 for i in range(L) if (i + 1) % iv == 0)
    else:
        full = L
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * mat + 4 * full * cfg["num_attention_heads"] * hd * (n / 2)

def pct(x):
    return "%.1f%%" % (100 * x) if x is not None else ""

def get(kind, model, fmt, what):
    """Measured rows (not errors) of one kind / model / format / measurement."""
    return [r for r in rows if r.get("kind") == kind and r.get("model") == model and r.get("format") == fmt
            and r.get("what") == what and "error" not in r]

# One roofline for every row: the highest streaming read measured in this
# run, torch's (a sum over 4 GiB) or ember's (its bench's own read probe).
reads = [hw["read_gbs"]] if hw else []
reads += [r["bandwidth_gbs"] for r in rows if r.get("kind") == "ember" and r.get("bandwidth_gbs")]
roof_bw = max(reads) * 1e9 if reads else None

models = []
for r in rows:
    if r.get("kind") in ("ember", "torch") and r.get("model") not in models and r.get("model") != "-":
        models.append(r["model"])
print()
if roof_bw:
    print("Roofline bandwidth: %.0f GB/s, the highest streaming read of this run (torch's sum over 4 GiB, "
          "ember bench's read probe of each model: %s GB/s)." % (roof_bw / 1e9, ", ".join(
              "%.0f" % r["bandwidth_gbs"] for r in rows if r.get("kind") == "ember" and r.get("bandwidth_gbs"))))
if hw:
    print("Device: %s; torch %s. Streaming read %.0f GB/s (sum over 4 GiB), copy %.0f GB/s; bf16 GEMM %d^3: "
          "%.0f TFLOP/s (%.0f%% of the %.0f TFLOP/s peak used below; the data sheet's dense bf16: 989)."
          % (hw.get("device"), hw.get("torch"), hw["read_gbs"], hw["copy_gbs"], hw["gemm_n"], hw["gemm_tflops"],
             100 * hw["gemm_tflops"] * 1e12 / peak, peak / 1e12))
else:
    print("No torch hardware figures (see results.jsonl).")
print()
print("| model | format | engine | decode tok/s | decode / HBM roofline | prefill 512 tok/s | of bf16 peak "
      "| prefill 4096 tok/s | of bf16 peak | notes |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for m in models:
    for fmt in ("bf16", "q4g64"):
        # ember
        e = get("ember", m, fmt, "decode512")
        errs = [r["error"] for r in rows if r.get("kind") == "ember" and r.get("model") == m
                and r.get("format") == fmt and "error" in r]
        if e or errs:
            e = e[0] if e else None
            p4 = get("ember", m, fmt, "prefill4096")
            p4 = p4[0] if p4 else None
            f512, f4096 = flops_per_token(m, 512), flops_per_token(m, 4096)
            cells = [m, fmt, "ember"]
            if e:
                frac = e["decode_tps"] * e["bytes_per_token"] / roof_bw if roof_bw else e.get("roofline_fraction")
                cells += ["%.1f" % e["decode_tps"], "%s (%.2f GB/token)" % (pct(frac), e["bytes_per_token"] / 1e9),
                    "%.0f" % e["prefill_tps"], pct(e["prefill_tps"] * f512 / peak) if f512 else ""]
            else:
                cells += ["", "", "", ""]
            if p4:
                cells += ["%.0f" % p4["prefill_tps"], pct(p4["prefill_tps"] * f4096 / peak) if f4096 else ""]
            else:
                cells += ["", ""]
            cells.append("; ".join(x.replace("|", "/") for x in errs)[:300])
            print("| " + " | ".join(cells) + " |")
        # torch
        t = [r for r in rows if r.get("kind") == "torch" and r.get("model") == m and r.get("format") == fmt]
        if not t:
            continue
        w = next((r for r in t if r.get("what") == "weights"), None)
        dec = [r for r in t if r.get("what") == "decode" and "tps" in r]
        best = max(dec, key=lambda r: r["tps"]) if dec else None
        pre = {r["tokens"]: r for r in t if r.get("what") == "prefill" and "tps" in r}
        notes = [("%s: %s" % (r.get("what"), r["error"])) for r in t if "error" in r]
        notes += [r["note"] for r in dec if r.get("note")]
        if dec:
            notes.append("decode " + ", ".join("%s %.1f" % (r["mode"], r["tps"]) for r in dec))
        cells = [m, fmt, "torch"]
        if best and w and roof_bw:
            cells += ["%.1f (%s)" % (best["tps"], best["mode"]),
                      "%s (%.2f GB/token)" % (pct(best["tps"] * w["bytes_per_token"] / roof_bw),
                                              w["bytes_per_token"] / 1e9)]
        elif best:
            cells += ["%.1f (%s)" % (best["tps"], best["mode"]), ""]
        else:
            cells += ["", ""]
        for n in (512, 4096):
            f = flops_per_token(m, n)
            if n in pre:
                cells += ["%.0f" % pre[n]["tps"], pct(pre[n]["tps"] * f / peak) if f else ""]
            else:
                cells += ["", ""]
        cells.append("; ".join(x.replace("|", "/") for x in notes)[:400])
        print("| " + " | ".join(cells) + " |")
print()
print("Both engines' decode fractions use the one roofline bandwidth above. "
      "Prefill fractions count matrix FLOPs and causal attention only.")
batched = [r for r in rows if r.get("kind") == "ember" and r.get("what") == "decode_batch"]
if batched:
    print()
    print("| model | format | sequences | ember decode tok/s (all sequences) | a step's weights / HBM roofline | notes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in batched:
        b = int(r.get("batch", 0))
        if "error" in r or not b:
            print("| %s | %s | %s | | | %s |" % (r["model"], r["format"], r.get("batch", ""),
                                               r.get("error", "").replace("|", "/")[:300]))
            continue
        frac = r["decode_tps"] / b * r["bytes_per_token"] / roof_bw if roof_bw else None
        print("| %s | %s | %d | %.1f | %s |  |" % (r["model"], r["format"], b, r["decode_tps"], pct(frac)))
    print()
    print("A batched step reads the weights once for all its sequences: the fraction is steps/s x the "
          "weights' bytes / the roofline bandwidth.")
PY
say "total $(($(date +%s) - t_start)) s"
