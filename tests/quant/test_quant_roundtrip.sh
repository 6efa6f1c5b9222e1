#!/usr/bin/env bash
# ember quantize -> load: logits equal those of the same artifact dequantized
# to an f32 checkpoint (prefill kernels and decode kernels); every bit width;
# a mixed recipe; sharded output; tokenizer/generation files carried over;
# an existing DST refused without --force and left untouched; no temporary
# directory left behind on failure; bad shapes in a quantized checkpoint
# are a clear load error.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
src="$EMBER_SRC/tests/golden/dense/llama_hd48_llama3_bias"
ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'][:12])))" "$src/ref.json")
cmp_models() { # $1 quantized, $2 label
  "$EMBER_BIN" quantize "$1" "$tmp/deq" --bits none --dtype f32 --force 2>/dev/null
  "$EMBER_BIN" logits "$1" --ids "$ids" --out "$tmp/a.bin"
  "$EMBER_BIN" logits "$tmp/deq" --ids "$ids" --out "$tmp/b.bin"
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/a.bin" "$tmp/b.bin" --rel 1e-5 --name "$2 prefill" || fail=1
  a=$("$EMBER_BIN" generate "$1" --ids "$ids" --max-tokens 8 --temperature 0 --ignore-eos --print-ids)
  b=$("$EMBER_BIN" generate "$tmp/deq" --ids "$ids" --max-tokens 8 --temperature 0 --ignore-eos --print-ids)
  if [ "$a" != "$b" ]; then echo "FAIL $2 decode: [$a] vs [$b]"; fail=1; else echo "ok   $2 decode"; fi
}
for bits in 2 3 4 5 6 8; do
  "$EMBER_BIN" quantize "$src" "$tmp/q$bits" --bits "$bits" --group-size 32 2>/dev/null
  cmp_models "$tmp/q$bits" "${bits}-bit"
done
# --search writes the same layout (other values): it loads and matches its dequantized self
"$EMBER_BIN" quantize "$src" "$tmp/q3s" --bits 3 --group-size 64 --search 2>/dev/null
cmp_models "$tmp/q3s" "3-bit --search"
# rows are quantized in parallel; the artifact does not depend on how many threads
for t in 1 3; do
  "$EMBER_BIN" quantize "$src" "$tmp/t$t" --bits 3 --group-size 64 --search --threads "$t" 2>/dev/null
  if cmp -s "$tmp/q3s/model.safetensors" "$tmp/t$t/model.safetensors"; then echo "ok   --threads $t: same bytes"
  else echo "FAIL --threads $t changes the artifact"; fail=1; fi
done
cat > "$tmp/recipe.json" <<'JSON'
{"bits": 4, "group_size": 64, "rules": [
  {"match": "model.embed_tokens", "bits": 8, "group_size": 32},
  {"match": "lm_head", "bits": 8},
  {"match": "model.layers.*.mlp.down_proj", "bits": 6, "group_size": 128},
  {"match": "model.layers.1.self_attn.*", "quantize": false}]}
JSON
"$EMBER_BIN" quantize "$src" "$tmp/mixed" --recipe "$tmp/recipe.json" --shard-size 0.0002 2>/dev/null
python3 - "$tmp/mixed" <<'PY' || fail=1
import json, os, sys
d = sys.argv[1]
q = json.load(open(os.path.join(d, "config.json")))["quantization"]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
shards = sorted(set(idx["weight_map"].values()))
ok = (q["bits"] == 4 and q["model.embed_tokens"] == {"group_size": 32, "bits": 8}
      and q["lm_head"] == {"group_size": 64, "bits": 8} and q["model.layers.1.self_attn.q_proj"] is False
      and q["model.layers.0.mlp.down_proj"] == {"group_size": 128, "bits": 6} and len(shards) > 1
      and "model.embed_tokens.scales" in idx["weight_map"] and os.path.exists(os.path.join(d, "generation_config.json")))
print(("ok  " if ok else "FAIL") + f" mixed recipe config, {len(shards)} shards")
sys.exit(0 if ok else 1)
PY
cmp_models "$tmp/mixed" "mixed+sharded"
# the Qwen3.5 family binds quantized weights through the same path (GDN, gated attention, MTP)
q35="$EMBER_SRC/tests/golden/qwen3_5/q35_mtp_ratio3"
ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'][:12])))" "$q35/ref.json")
"$EMBER_BIN" quantize "$q35" "$tmp/q35" --bits 4 --group-size 32 2>/dev/null
cmp_models "$tmp/q35" "qwen3.5 4-bit"
ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'][:12])))" "$src/ref.json")
# refusals
if "$EMBER_BIN" quantize "$src" "$tmp/q4" --bits 4 2>"$tmp/err"; then echo "FAIL existing DST accepted"; fail=1
elif ! grep -q "already exists" "$tmp/err"; then echo "FAIL message: $(cat "$tmp/err")"; fail=1; else echo "ok   existing DST refused"; fi
"$EMBER_BIN" logits "$tmp/q4" --ids "$ids" --out "$tmp/c.bin" || { echo "FAIL refused DST damaged"; fail=1; }
set +e; "$EMBER_BIN" quantize "$src" "$tmp/x" --bits 7 2>/dev/null; rc=$?; set -e
[ $rc -eq 2 ] && echo "ok   --bits 7 is a usage error" || { echo "FAIL --bits 7 rc=$rc"; fail=1; }
mkdir "$tmp/bad"; echo '{' > "$tmp/bad/config.json"; cp "$src/model.safetensors" "$tmp/bad/"
if "$EMBER_BIN" quantize "$tmp/bad" "$tmp/out_bad" 2>/dev/null; then echo "FAIL bad source accepted"; fail=1; fi
if ls -d "$tmp"/out_bad* 2>/dev/null | grep -q .; then echo "FAIL temporary output left behind"; fail=1; else echo "ok   nothing left on failure"; fi
# a config whose group size disagrees with the tensors: load error naming it
cp -r "$tmp/q4" "$tmp/q4bad"
python3 - "$tmp/q4bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["quantization"]["group_size"] = 64; c["quantization_config"] = c["quantization"]
json.dump(c, open(sys.argv[1], "w"))
PY
if "$EMBER_BIN" logits "$tmp/q4bad" --ids "$ids" --out "$tmp/d.bin" 2>"$tmp/err"; then echo "FAIL wrong group size loaded"; fail=1
elif ! grep -q "scales" "$tmp/err"; then echo "FAIL message: $(cat "$tmp/err")"; fail=1; else echo "ok   wrong group size: $(head -c 160 "$tmp/err")"; fi
exit $fail
