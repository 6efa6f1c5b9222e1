#!/usr/bin/env bash
# Shared parity check against transformers goldens, sourced by the family
# tests: for every checkpoint directory under $1 (each with ref.json and
# logits.bin made by tools/oracle/), (1) `ember logits` over the reference
# ids matches the float64 reference logits within $2 of the logit range
# (any extra arguments go to `ember logits`), (2) the greedy continuation
# of `ember generate --print-ids` (decoded token by token) matches.
# Returns non-zero when anything differs.
golden_parity() {
  local dir=$1 rel=$2; shift 2
  local tmp fail=0 d name ids want n got
  tmp=$(mktemp -d)
  for d in "$dir"/*/; do
    name=$(basename "$d")
    ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
    "$EMBER_BIN" logits "$d" --ids "$ids" --out "$tmp/$name.bin" "$@" || { fail=1; continue; }
    python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.bin" "$d/logits.bin" --rel "$rel" --name "$name" || fail=1
    want=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join(map(str, r['greedy'])))" "$d/ref.json")
    n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_new'])" "$d/ref.json")
    got=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids "$@")
    if [ "$got" != "$want" ]; then
      echo "FAIL $name greedy: got [$got] want [$want]"; fail=1
    else
      echo "ok   $name greedy ($n tokens)"
    fi
  done
  rm -rf "$tmp"
  return $fail
}
