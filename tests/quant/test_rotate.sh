#!/usr/bin/env bash
# Rotation folding: for every Llama-family and Qwen3.5 golden (text, VL and
# MTP layouts, tied, q/k/v bias; R1 only there) (GQA, MHA, biases, q/k
# norms, head_dim 48 = 12*4 and 40 = 20*2, hidden 96 = 12*8, tied and untied)
# a rotated but unquantized f32 checkpoint gives the original's logits within
# f32 tolerance, also with channels kept out of R1 (--rotate-keep); the
# artifact records the transform (and the kept channels) and unties the head; a
# rotated quantized artifact loads and decodes like its own dequantized copy.
# Online rotations (--rotate-online, Llama family): the same f32 equality for
# every dense golden, the artifact naming the rotations it needs (head kept
# tied), a 4-bit one decoding like its dequantized copy, the plan, the
# refusals, and a rotation this build does not know refused at load.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for d in "$EMBER_SRC"/tests/golden/dense/*/ "$EMBER_SRC"/tests/golden/qwen3_5/*/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  "$EMBER_BIN" quantize "$d" "$tmp/$name" --rotate --seed 11 --bits none --dtype f32 2>/dev/null
  "$EMBER_BIN" logits "$tmp/$name" --ids "$ids" --out "$tmp/r.bin"
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/r.bin" "$d/logits.bin" --rel 1e-5 --name "rotated $name" || fail=1
done
# with residual channels kept out of R1 (--rotate-keep): the same function again
for d in "$EMBER_SRC"/tests/golden/dense/*/ "$EMBER_SRC"/tests/golden/qwen3_5/*/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  "$EMBER_BIN" quantize "$d" "$tmp/k_$name" --rotate --rotate-keep 3 --seed 5 --bits none --dtype f32 2>/dev/null
  "$EMBER_BIN" logits "$tmp/k_$name" --ids "$ids" --out "$tmp/k.bin"
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/k.bin" "$d/logits.bin" --rel 1e-5 --name "rotated, 3+ channels kept, $name" || fail=1
done
python3 - "$tmp/k_llama_gqa_tied" <<'PY' || fail=1
import json, os, struct, sys
d = sys.argv[1]
t = json.load(open(os.path.join(d, "config.json")))["ember_transform"]
f = open(os.path.join(d, "model.safetensors"), "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
g = h["model.layers.0.input_layernorm.weight"]
kept = t.get("r1_kept_channels", [])
ok = t["id"].endswith("+kept") and len(kept) >= 3 and "kept out" in t["deviations"] and len(kept) < g["shape"][0]
print(("ok  " if ok else "FAIL") + " kept channels recorded: %d of %d" % (len(kept), g["shape"][0]))
sys.exit(0 if ok else 1)
PY
# the MTP head (its own folded copy in the artifact) drafts as before
a=$("$EMBER_BIN" bench "$EMBER_SRC/tests/golden/qwen3_5/q35_mtp_ratio3" --spec mtp --prompt-tokens 16 --gen-tokens 24 --temperature 0 --seed 1 --json | grep '"spec"')
b=$("$EMBER_BIN" bench "$tmp/q35_mtp_ratio3" --spec mtp --prompt-tokens 16 --gen-tokens 24 --temperature 0 --seed 1 --json | grep '"spec"')
k=$("$EMBER_BIN" bench "$tmp/k_q35_mtp_ratio3" --spec mtp --prompt-tokens 16 --gen-tokens 24 --temperature 0 --seed 1 --json | grep '"spec"')
rate() { sed -E 's/.*"acceptance_rate":([0-9.]+).*/\1/' <<<"$1"; }
[ "$(rate "$a")" = "$(rate "$b")" ] && echo "ok   rotated MTP drafts accepted as before" || { echo "FAIL MTP acceptance: $a vs $b"; fail=1; }
[ "$(rate "$a")" = "$(rate "$k")" ] && echo "ok   rotated MTP drafts, channels kept, accepted as before" \
  || { echo "FAIL MTP acceptance with kept channels: $a vs $k"; fail=1; }
python3 - "$tmp/llama_gqa_tied" <<'PY' || fail=1
import json, os, struct, sys
d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
f = open(os.path.join(d, "model.safetensors"), "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
m = h["__metadata__"]
ok = (c["tie_word_embeddings"] is False and c["ember_transform"]["seed"] == 11 and "lm_head.weight" in h
      and m["ember.transform"].startswith("ember-rotate-v1") and m["ember.family"] == "llama" and m["ember.seed"] == "11")
print(("ok  " if ok else "FAIL") + " transform recorded, head untied")
sys.exit(0 if ok else 1)
PY
src="$EMBER_SRC/tests/golden/dense/qwen3_qknorm"
ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'][:10])))" "$src/ref.json")
"$EMBER_BIN" quantize "$src" "$tmp/rq" --rotate --bits 4 --group-size 32 2>/dev/null
"$EMBER_BIN" quantize "$tmp/rq" "$tmp/rqd" --bits none --dtype f32 2>/dev/null
a=$("$EMBER_BIN" generate "$tmp/rq" --ids "$ids" --max-tokens 6 --temperature 0 --ignore-eos --print-ids)
b=$("$EMBER_BIN" generate "$tmp/rqd" --ids "$ids" --max-tokens 6 --temperature 0 --ignore-eos --print-ids)
[ "$a" = "$b" ] && echo "ok   rotated 4-bit decodes like its dequantized copy" || { echo "FAIL rotated 4-bit [$a] vs [$b]"; fail=1; }
"$EMBER_BIN" quantize "$EMBER_SRC/tests/golden/dense/llama_gqa_tied" --plan --rotate > "$tmp/plan.txt"
grep -q "^lm_head.weight .* <- model.embed_tokens.weight \* gain(model.norm.weight) . R1" "$tmp/plan.txt" \
  && grep -q "self_attn.v_proj.weight .* R1 R2\[layer 0\]^T" "$tmp/plan.txt" \
  && echo "ok   plan lists the untied head and R2" || { echo "FAIL plan"; head -5 "$tmp/plan.txt"; fail=1; }
if "$EMBER_BIN" quantize "$src" "$tmp/x" --rotate --family qwen3_5 2>"$tmp/err"; then echo "FAIL wrong family accepted"; fail=1
else echo "ok   wrong family refused: $(head -c 120 "$tmp/err")"; fi
if "$EMBER_BIN" quantize "$src" "$tmp/x" --rotate --rotate-keep 100000 2>"$tmp/err"; then echo "FAIL keeping every channel accepted"; fail=1
else grep -q "leaves nothing to rotate" "$tmp/err" && echo "ok   keeping every channel refused" || { echo "FAIL: $(cat "$tmp/err")"; fail=1; }; fi
if "$EMBER_BIN" quantize "$src" "$tmp/x" --rotate-keep 2 2>"$tmp/err"; then echo "FAIL --rotate-keep without --rotate accepted"; fail=1
else echo "ok   --rotate-keep without --rotate refused"; fi
# online rotations: each block's normed input rotated at run time
for d in "$EMBER_SRC"/tests/golden/dense/*/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  "$EMBER_BIN" quantize "$d" "$tmp/o_$name" --rotate-online --seed 7 --bits none --dtype f32 2>/dev/null
  "$EMBER_BIN" logits "$tmp/o_$name" --ids "$ids" --out "$tmp/o.bin"
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/o.bin" "$d/logits.bin" --rel 1e-5 --name "online-rotated $name" || fail=1
done
python3 - "$tmp/o_llama_gqa_tied" <<'PY' || fail=1
import json, os, struct, sys
c = json.load(open(os.path.join(sys.argv[1], "config.json")))
t = c["ember_transform"]
f = open(os.path.join(sys.argv[1], "model.safetensors"), "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
ok = (t["online_rotations"] == ["attention_input", "mlp_input"] and t["id"] == "ember-rotate-v1:online-inputs"
      and t["seed"] == 7 and c["tie_word_embeddings"] is True and "lm_head.weight" not in h)
print(("ok  " if ok else "FAIL") + " online rotations recorded, head still tied")
sys.exit(0 if ok else 1)
PY
ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'][:10])))" "$src/ref.json")
"$EMBER_BIN" quantize "$src" "$tmp/oq" --rotate-online --bits 4 --group-size 32 2>/dev/null
"$EMBER_BIN" quantize "$tmp/oq" "$tmp/oqd" --bits none --dtype f32 2>/dev/null
a=$("$EMBER_BIN" generate "$tmp/oq" --ids "$ids" --max-tokens 6 --temperature 0 --ignore-eos --print-ids)
b=$("$EMBER_BIN" generate "$tmp/oqd" --ids "$ids" --max-tokens 6 --temperature 0 --ignore-eos --print-ids)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   online-rotated 4-bit decodes like its dequantized copy" || { echo "FAIL online 4-bit [$a] vs [$b]"; fail=1; }
"$EMBER_BIN" quantize "$EMBER_SRC/tests/golden/dense/llama_gqa_tied" --plan --rotate-online > "$tmp/oplan.txt"
grep -q "^model.layers.0.self_attn.q_proj.weight .* . Q\[layer 0 attention\] (online)" "$tmp/oplan.txt" \
  && grep -q "^model.layers.1.post_attention_layernorm.weight .* \* D\[layer 1 mlp\]" "$tmp/oplan.txt" \
  && grep -q "^model.layers.0.self_attn.o_proj.weight \[.*\] <- model.layers.0.self_attn.o_proj.weight$" "$tmp/oplan.txt" \
  && echo "ok   online plan: readers take Q, norms their signs, writers unchanged" || { echo "FAIL online plan"; head -8 "$tmp/oplan.txt"; fail=1; }
if "$EMBER_BIN" quantize "$EMBER_SRC/tests/golden/qwen3_5/q35_mtp_ratio3" "$tmp/x" --rotate-online 2>"$tmp/err"; then
  echo "FAIL online rotations accepted for Qwen3.5"; fail=1
else grep -q "Llama-family graph only" "$tmp/err" && echo "ok   online rotations refused for Qwen3.5" || { echo "FAIL: $(cat "$tmp/err")"; fail=1; }; fi
if "$EMBER_BIN" quantize "$src" "$tmp/x" --rotate --rotate-online 2>"$tmp/err"; then echo "FAIL --rotate with --rotate-online accepted"; fail=1
else echo "ok   --rotate with --rotate-online refused"; fi
if "$EMBER_BIN" quantize "$src" "$tmp/x" --rotate-online --rotate-keep 2 2>"$tmp/err"; then echo "FAIL --rotate-keep with --rotate-online accepted"; fail=1
else echo "ok   --rotate-keep with --rotate-online refused"; fi
# an artifact naming a rotation this build does not apply is refused at load
cp -r "$tmp/o_llama_gqa_tied" "$tmp/bad"
python3 - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["ember_transform"]["online_rotations"].append("down_input")
json.dump(c, open(sys.argv[1], "w"))
PY
if "$EMBER_BIN" logits "$tmp/bad" --ids 1,2 --out "$tmp/b.bin" 2>"$tmp/err"; then echo "FAIL unknown online rotation loaded"; fail=1
else grep -q "online_rotations\[2\]" "$tmp/err" && echo "ok   unknown online rotation refused: $(head -c 150 "$tmp/err")" || { echo "FAIL: $(cat "$tmp/err")"; fail=1; }; fi
exit $fail
