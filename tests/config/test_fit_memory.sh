#!/usr/bin/env bash
# ember fit against measured peaks: for synthetic checkpoints (f32 untied,
# bf16 tied, KV-heavy) and several contexts, the predicted peak must be
# within 10% of the VmHWM `ember generate --stats` reports. Also: the budget
# decides fits / does not fit, and the largest context is consistent.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
if [ "${EMBER_SANITIZED:-}" = 1 ]; then echo "skipped: sanitizers change resident memory"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mk="$EMBER_SRC/tests/support/make_synthetic_model.py"
#            dir       hidden heads kv hd  inter layers vocab dtype tied max_pos
python3 "$mk" "$tmp/a" 256    16    16 128 512   4      4096  F32   0    4096
python3 "$mk" "$tmp/b" 512    8     2  64  1408  6      8192  BF16  1    2048
python3 "$mk" "$tmp/c" 128    8     8  128 256   4      2048  F32   0    2048

ids() { python3 -c "print(','.join(str(i % 100 + 1) for i in range($1)))"; }
fail=0
for spec in "a 64" "b 300" "c 40" "c 400"; do
    set -- $spec
    n=$2
    pred=$("$EMBER_BIN" fit "$tmp/$1" --ctx $((n + 2)) --threads 2 --json |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])')
    meas=$("$EMBER_BIN" generate "$tmp/$1" --ids "$(ids "$n")" --max-tokens 2 --ignore-eos --threads 2 --stats 2>&1 >/dev/null |
           sed -n 's/^peak resident memory \([0-9]*\) bytes$/\1/p')
    ratio=$(python3 -c "print(f'{$pred / $meas:.3f}')")
    echo "model $1, context $((n + 2)): predicted $pred, measured $meas, ratio $ratio"
    python3 -c "import sys; sys.exit(0 if abs($pred / $meas - 1) <= 0.10 else 1)" || fail=1
done
[ "$fail" = 0 ]

# the budget decides; the largest context that fits is where the prediction crosses it
j=$("$EMBER_BIN" fit "$tmp/c" --ctx 1000 --memory-budget 40000000 --json || true)
python3 - "$j" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert not d["fits"] and d["peak_bytes"] > 40000000, d
assert 0 < d["max_context"] < 1000, d
assert d["kv_bytes_per_token"] == 4 * 2 * 8 * 128 * 4, d
PY
max=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['max_context'])" "$j")
"$EMBER_BIN" fit "$tmp/c" --ctx "$max" --memory-budget 40000000 >/dev/null
if "$EMBER_BIN" fit "$tmp/c" --ctx $((max + 1)) --memory-budget 40000000 >/dev/null; then echo "fits past max_context"; exit 1; fi
"$EMBER_BIN" fit "$tmp/b" --ctx 100 --batch 4 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["kv_bytes"] == 6 * 2 * 2 * 64 * 4 * 128 * 4, d  # 100 positions -> 4 blocks of 32, 4 sequences
'

# --measure on the cpu: the model opened, every sequence prefilled to its context
m=$("$EMBER_BIN" fit "$tmp/c" --ctx 402 --batch 2 --threads 2 --measure --json)
python3 - "$m" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
r = d["predicted_measurable_bytes"] / d["measured_peak_bytes"]
print(f"fit --measure (cpu): predicted {d['predicted_measurable_bytes']}, measured {d['measured_peak_bytes']}, ratio {r:.3f}")
assert abs(r - 1) <= 0.10, d
PY

# --device cuda predicts without a GPU too: the CUDA backend's allocations,
# from the headers (the GPU test, test_fit_cuda.sh, measures them)
j=$("$EMBER_BIN" fit "$tmp/b" --ctx 100 --batch 4 --device cuda --json)
python3 - "$j" "$tmp/b/model.safetensors" <<'PY'
import json, struct, sys
d = json.loads(sys.argv[1])
raw = open(sys.argv[2], "rb").read(8)
hdr = json.loads(open(sys.argv[2], "rb").read(8 + struct.unpack("<Q", raw)[0])[8:])
def dev(b):  # cudaMalloc granularity as fit models it
    g = 2 << 20 if b >= 2 << 20 else 512
    return -(-b // g) * g
w = sum(dev(v["data_offsets"][1] - v["data_offsets"][0]) for k, v in hdr.items() if k != "__metadata__" and len(v["shape"]) == 2)
assert d["weights_bytes"] == w, (d["weights_bytes"], w)
assert d["kv_bytes"] == 6 * 2 * dev(128 * 4 * 2 * 64 * 4), d  # a K and a V buffer per layer, 4 blocks of 32
assert d["peak_bytes"] == sum(d[k] for k in ("weights_bytes", "vectors_bytes", "kv_bytes", "transient_bytes",
                                             "scratch_bytes", "backend_bytes", "code_bytes", "context_bytes")), d
if "capacity_note" in d:  # no GPU here: the capacity is unknown, and that is no failure
    assert d["fits"] is None and d["capacity_bytes"] is None and d["max_context"] is None, d
PY
# the matmul scratch follows the precision: bf16 activations (FAST) or widened weights (EXACT)
sc() { "$EMBER_BIN" fit "$tmp/b" --ctx 300 --device cuda --precision "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["scratch_bytes"])'; }
# plus the decode row's attention splits: 1.25 x 8 heads x 16 splits x (64 + 2) f32, 512-byte aligned = 42496
# FAST also: the bf16 copy of a layer's keys and values that prefill attention reads, for the
# context's 320 positions (blocks of 32) x 2 kv heads x 64 dims x (K, V) x bf16 = 163840
[ "$(sc fast)" = $((1056256 + 42496 + 163840)) ] || { echo "fast scratch $(sc fast)"; exit 1; }   # 1.25 x 300 rows x 1408 x bf16
[ "$(sc exact)" = $((4194304 + 42496)) ] || { echo "exact scratch $(sc exact)"; exit 1; } # 1.25 x 1408 x 512 f32, in 2 MiB pages
# a budget decides without a GPU
"$EMBER_BIN" fit "$tmp/b" --ctx 300 --device cuda --memory-budget 100000000000 >/dev/null
if "$EMBER_BIN" fit "$tmp/b" --ctx 300 --device cuda --memory-budget 1000000 >/dev/null; then echo "1 MB fits"; exit 1; fi
# models the CUDA backend cannot run are refused with the reason
# Qwen3.5 hybrids: the recurrent state of every sequence (one reservation) and one sequence's zeros,
# the full-attention layers' and the MTP head's KV, the 3-D convolution weights as f32 vectors
for q in q35_tied_ratio2 q35_mtp_ratio3; do
    d="$EMBER_SRC/tests/golden/qwen3_5/$q"
    j=$("$EMBER_BIN" fit "$d" --ctx 64 --batch 3 --device cuda --json)
    python3 - "$j" "$d" <<'PY'
import json, math, os, struct, sys
d, root = json.loads(sys.argv[1]), sys.argv[2]
c = json.load(open(os.path.join(root, "config.json")))
c = c.get("text_config", c)
def dev(b):
    g = 2 << 20 if b >= 2 << 20 else 512
    return -(-b // g) * g
L = c["num_hidden_layers"]
types = c.get("layer_types") or ["linear_attention" if (i + 1) % c["full_attention_interval"] else "full_attention"
                                 for i in range(L)]
lin = types.count("linear_attention")
kh, vh, kd, vd, kern = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                        c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
seq = lin * ((kern - 1) * (2 * kh * kd + vh * vd) + vh * kd * vd) * 4
assert d["state_bytes_per_sequence"] == seq, (d, seq)
assert d["state_bytes"] == dev(3 * seq) + dev(seq), d
kv_layers = L - lin + (c.get("mtp_num_hidden_layers") or 0)
assert d["kv_layers"] == kv_layers, d
assert d["kv_bytes"] == 2 * kv_layers * dev(64 * 3 * c["num_key_value_heads"] * c["head_dim"] * 4), d
raw = open(os.path.join(root, "model.safetensors"), "rb").read(8)
hdr = json.loads(open(os.path.join(root, "model.safetensors"), "rb").read(8 + struct.unpack("<Q", raw)[0])[8:])
shapes = [v["shape"] for k, v in hdr.items() if k != "__metadata__"]
n = lambda s: math.prod(s)
assert d["vectors_bytes"] == sum(dev(n(s) * 4) for s in shapes if len(s) in (1, 3)), d
assert d["peak_bytes"] == sum(d[k] for k in ("weights_bytes", "vectors_bytes", "kv_bytes", "state_bytes", "transient_bytes",
                                             "scratch_bytes", "backend_bytes", "code_bytes", "context_bytes")), d
PY
done
# quantized weights: every 2-D tensor (codes, scales, biases) as stored
for q in mixed_untied tied_3bit; do
    d="$EMBER_SRC/tests/golden/quant/$q/quant"
    j=$("$EMBER_BIN" fit "$d" --ctx 64 --device cuda --json)
    python3 - "$j" "$d/model.safetensors" <<'PY'
import json, struct, sys
d = json.loads(sys.argv[1])
raw = open(sys.argv[2], "rb").read(8)
hdr = json.loads(open(sys.argv[2], "rb").read(8 + struct.unpack("<Q", raw)[0])[8:])
def dev(b):
    g = 2 << 20 if b >= 2 << 20 else 512
    return -(-b // g) * g
w = sum(dev(v["data_offsets"][1] - v["data_offsets"][0]) for k, v in hdr.items() if k != "__metadata__" and len(v["shape"]) == 2)
assert d["weights_bytes"] == w, (sys.argv[2], d["weights_bytes"], w)
PY
done
# and the scratch of the kernel each product takes: model b at 4 bits, groups of 64
"$EMBER_BIN" quantize "$tmp/b" "$tmp/bq" --bits 4 --group-size 64 >/dev/null 2>&1
scq() { "$EMBER_BIN" fit "$tmp/bq" --ctx 300 --batch "$2" --device cuda --precision "$1" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["scratch_bytes"])'; }
# FAST prefill of 300 rows: bf16 rows (as above) and each matrix dequantized whole to bf16, the largest
# 1.25 x 1408 x 512 x bf16 = 1802240; a decode row: attention's splits; the keys and values' bf16 copy
[ "$(scq fast 1)" = $((1056256 + 1802240 + 42496 + 163840)) ] || { echo "q4 fast scratch $(scq fast 1)"; exit 1; }
# a decode step of 8 rows on the bf16 tensor-core kernel: 1.25 x (8 x 1408 x bf16 + 22 groups x 8 x f32),
# 512-byte aligned = 29184; attention's splits for 8 rows: 1.25 x 8 x 8 heads x 16 x 66 x f32 = 337920
[ "$(scq fast 8)" = $((1056256 + 1802240 + 337920 + 29184 + 163840)) ] || { echo "q4 fast batch-8 scratch $(scq fast 8)"; exit 1; }
# EXACT prefill: f32 slices of W (1.25 x 1408 x 512 x f32, in 2 MiB pages)
[ "$(scq exact 1)" = $((4194304 + 42496)) ] || { echo "q4 exact scratch $(scq exact 1)"; exit 1; }
echo ok
