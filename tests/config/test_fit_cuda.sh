#!/usr/bin/env bash
# ember fit --device cuda against the GPU: for the demo model, the dense
# golden checkpoints and synthetic checkpoints large enough that the KV
# cache, the weights and the matmul scratch dominate (bf16, f32, and 4- and
# 8-bit quantizations of one; a Qwen3.5 hybrid, bf16 and 4-bit), at several contexts,
# batches and both precisions, the predicted device memory (less the CUDA
# context, which exists before the first reading) must be within 10% of
# what `ember fit --measure` measures: the fall of the GPU's free memory
# while the model is opened, every sequence is prefilled to its context and
# one decode step runs. Each case prints the prediction by component and
# the measurement. Exits 77 (skip) without a GPU or in a build without CUDA.
#
# EMBER_TEST_CUDA_DEVICE picks the GPU (default 0). The GPU should be idle:
# another process allocating meanwhile changes the measured fall.
set -uo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
if [ "${EMBER_SANITIZED:-}" = 1 ]; then echo "skipped: sanitized builds run without CUDA"; exit 77; fi
DEV="cuda:${EMBER_TEST_CUDA_DEVICE:-0}"
probe=$("$EMBER_BIN" fit "$EMBER_SRC/models/demo" --ctx 16 --device "$DEV" --json) || { echo "ember fit failed"; exit 1; }
note=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("capacity_note", ""))' "$probe") ||
    { echo "ember fit --json printed no JSON: $probe"; exit 1; }
if [ -n "$note" ]; then echo "skipped: no GPU for $DEV: $note"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mk="$EMBER_SRC/tests/support/make_synthetic_model.py"
#            dir       hidden heads kv hd  inter layers vocab dtype tied max_pos
python3 "$mk" "$tmp/big16" 2048 16    8  128 5632  8      32000 BF16  0    8192   # ~1 GB of bf16 weights
python3 "$mk" "$tmp/big32" 1024 8     8  128 2816  8      16000 F32   1    4096   # f32: no widening
python3 "$mk" "$tmp/kvheavy" 512 8    8  64  1024  16     4096  BF16  1    16384  # KV dominates

fail=0
n=0
# case: model ctx batch precision
run_case() {
    local dir=$1 ctx=$2 batch=$3 prec=$4 name
    name=$(basename "$dir")
    local out
    if ! out=$("$EMBER_BIN" fit "$dir" --ctx "$ctx" --batch "$batch" --device "$DEV" --precision "$prec" --measure --json 2>&1); then
        echo "FAIL: $name ctx $ctx batch $batch $prec: ember fit failed: $out"
        fail=1
        return
    fi
    n=$((n + 1))
    python3 - "$out" "$name" "$ctx" "$batch" "$prec" <<'PY' || fail=1
import json, sys
d = json.loads(sys.argv[1])
name, ctx, batch, prec = sys.argv[2:6]
mib = lambda b: f"{b / 2**20:.1f}"
pred, meas = d["predicted_measurable_bytes"], d["measured_peak_bytes"]
ratio = pred / meas if meas else float("inf")
ok = abs(ratio - 1) <= 0.10
parts = ", ".join(f"{k.replace('_bytes', '')} {mib(d[k])}" for k in
                  ("weights_bytes", "vectors_bytes", "kv_bytes", "transient_bytes", "scratch_bytes", "backend_bytes",
                   "code_bytes"))
print(f"{'ok  ' if ok else 'FAIL'} {name:26} ctx {ctx:>5} batch {batch:>3} {prec:5}: predicted {mib(pred)} MiB, "
      f"measured {mib(meas)} MiB, ratio {ratio:.3f}")
print(f"       predicted: {parts} (MiB); context {mib(d['context_bytes'])} MiB not measurable, "
      f"in use before loading {mib(d['measured_in_use_before_bytes'])} of {mib(d['device_total_bytes'])} MiB")
sys.exit(0 if ok else 1)
PY
}

run_case "$EMBER_SRC/models/demo" 2048 1 fast
run_case "$EMBER_SRC/models/demo" 2048 32 fast
run_case "$EMBER_SRC/models/demo" 1024 8 exact
for g in "$EMBER_SRC"/tests/golden/dense/*/; do
    ctx=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["max_position_embeddings"])' "$g/config.json")
    run_case "${g%/}" "$ctx" 64 fast
done
run_case "$tmp/big16" 4096 4 fast
run_case "$tmp/big16" 8192 1 exact     # EXACT prefill: 128 MiB slices of widened weights
run_case "$tmp/big16" 512 96 exact     # a decode step of 96 rows: SGEMM over the head too
run_case "$tmp/big32" 4096 8 fast
run_case "$tmp/kvheavy" 16384 4 fast
run_case "$tmp/kvheavy" 3000 16 exact
# quantized weights: codes, scales and biases as stored, and each product's
# kernel's scratch (bf16 slices for FAST prefill, f32 ones for EXACT, the
# tensor-core kernels' rounded rows for decode batches)
"$EMBER_BIN" quantize "$tmp/big16" "$tmp/big16q4" --bits 4 --group-size 64 >/dev/null 2>&1 &&
    "$EMBER_BIN" quantize "$tmp/big16" "$tmp/big16q8" --bits 8 --group-size 32 >/dev/null 2>&1 ||
    { echo "FAIL: ember quantize"; fail=1; }
run_case "$tmp/big16q4" 4096 1 fast
run_case "$tmp/big16q4" 2048 24 fast   # a decode step of 24 rows on the bf16 tensor-core kernel
run_case "$tmp/big16q4" 2048 48 fast   # two passes of it
run_case "$tmp/big16q4" 1024 8 exact   # EXACT prefill: f32 slices
run_case "$tmp/big16q8" 2048 12 fast   # 8-bit: the int8 GEMV's rounded rows
run_case "$tmp/big16q8" 2048 32 fast   # the int8 tensor-core kernel
# a Qwen3.5 hybrid (8 layers of the 4B shape, 6 of them Gated DeltaNet): its recurrent state,
# nineteen activation buffers and the MTP head's KV layer; at 64 sequences the state dominates
python3 "$EMBER_SRC/bench/make_random_model.py" "$tmp/q35" --shape qwen3.5-4b --layers 8 >/dev/null &&
    "$EMBER_BIN" quantize "$tmp/q35" "$tmp/q35q4" --bits 4 --group-size 64 >/dev/null 2>&1 ||
    { echo "FAIL: making the Qwen3.5 checkpoints"; fail=1; }
run_case "$tmp/q35" 4096 4 fast
run_case "$tmp/q35" 2048 64 fast
run_case "$tmp/q35" 1024 8 exact
run_case "$tmp/q35q4" 2048 16 fast

# the capacity comes from the GPU: a budget below the prediction does not fit
j=$("$EMBER_BIN" fit "$tmp/big16" --ctx 4096 --device "$DEV" --json)
python3 - "$j" <<'PY' || fail=1
import json, sys
d = json.loads(sys.argv[1])
assert d["capacity_bytes"] and d["fits"] in (True, False) and d["max_context"] is not None, d
print(f"capacity of the GPU as fit sees it: {d['capacity_bytes'] / 2**30:.1f} GiB")
PY
if "$EMBER_BIN" fit "$tmp/big16" --ctx 4096 --device "$DEV" --memory-budget 100000000 >/dev/null; then
    echo "FAIL: a 100 MB budget fits a 1 GB model"; fail=1
fi
echo "$n cases measured"
[ "$fail" = 0 ]
