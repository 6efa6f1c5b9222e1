#!/usr/bin/env bash
# MLX-layout quantized checkpoints made by tools/oracle/make_quant_goldens.py
# (mixed bits 2..8 and group sizes, quantized embedding, quantized untied head,
# tied head through the quantized embedding, one module left in bf16):
# (1) full-sequence logits match the float64 reference computed from the
# dequantized weights; (2) the greedy continuation (decode path, fused
# kernels) matches; (3) `ember quantize` of the bf16 source with the same
# recipe writes the same tensors byte for byte.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for d in "$EMBER_SRC"/tests/golden/quant/*/; do
  name=$(basename "$d"); q="$d/quant"
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$q/ref.json")
  "$EMBER_BIN" logits "$q" --ids "$ids" --out "$tmp/$name.bin"
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.bin" "$q/logits.bin" --rel 1e-5 --name "$name" || fail=1
  want=$(python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['greedy'])))" "$q/ref.json")
  n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_new'])" "$q/ref.json")
  got=$("$EMBER_BIN" generate "$q" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids)
  if [ "$got" != "$want" ]; then echo "FAIL $name greedy: got [$got] want [$want]"; fail=1; else echo "ok   $name greedy"; fi
  "$EMBER_BIN" quantize "$d/src" "$tmp/$name.q" --recipe "$d/recipe.json" 2>/dev/null
  python3 "$EMBER_SRC/tests/support/compare_safetensors.py" "$tmp/$name.q" "$q" || fail=1
done
exit $fail
