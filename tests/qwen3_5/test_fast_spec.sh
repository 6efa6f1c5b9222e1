#!/usr/bin/env bash
# Qwen3.5 in FAST arithmetic: greedy decoding with MTP speculation gives the
# ids of plain greedy decoding, its verify spans (several rows, head
# included) giving each row the bits of a single-row step.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
fail=0
json() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); v=r[sys.argv[2]]; print(','.join(map(str, v)) if isinstance(v, list) else v)" "$1" "$2"; }
for d in "$EMBER_SRC"/tests/golden/qwen3_5/*/; do
  [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('mtp_num_hidden_layers', 0))" "$d/config.json")" != 0 ] || continue
  name=$(basename "$d")
  gen=(generate "$d" --ids "$(json "$d/ref.json" ids)" --max-tokens 24 --temperature 0 --ignore-eos --print-ids --precision fast --device cpu)
  want=$("$EMBER_BIN" "${gen[@]}")
  for k in 1 3; do
    got=$("$EMBER_BIN" "${gen[@]}" --spec mtp --draft-tokens "$k")
    if [ "$got" != "$want" ]; then echo "FAIL $name FAST speculative (k=$k): [$got] vs [$want]"; fail=1
    else echo "ok   $name FAST speculative (k=$k) equals FAST greedy"; fi
  done
done
exit $fail
