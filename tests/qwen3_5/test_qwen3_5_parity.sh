#!/usr/bin/env bash
# Parity of the Qwen3.5 family against transformers: for every golden
# checkpoint (text and VL layouts, sequences crossing the 64-token chunk of
# the delta rule), (1) full-sequence logits match the float64 reference,
# (2) the greedy continuation matches (generate decodes token by token, so
# this also checks the recurrent form after a chunked prefill).
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for d in "$EMBER_SRC"/tests/golden/qwen3_5/*/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  "$EMBER_BIN" logits "$d" --ids "$ids" --out "$tmp/$name.bin"
  if ! python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.bin" "$d/logits.bin" --rel 1e-5 --name "$name"; then
    fail=1
  fi
  want=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join(map(str, r['greedy'])))" "$d/ref.json")
  n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_new'])" "$d/ref.json")
  got=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids)
  if [ "$got" != "$want" ]; then
    echo "FAIL $name greedy: got [$got] want [$want]"; fail=1
  else
    echo "ok   $name greedy ($n tokens)"
  fi
done
exit $fail
