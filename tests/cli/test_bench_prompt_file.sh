#!/usr/bin/env bash
# `ember bench --prompt-file`: the prompt is the file's text through the
# model's tokenizer, cut to --prompt-tokens (all of it when shorter), and the
# JSON says so; empty, missing and out-of-vocabulary prompts are clear errors.
# Also `--cached N` (the tail of a prompt whose prefix is cached),
# `--prefill-chunk N`, the two bandwidth probes behind the roofline, and the
# other options' usage errors.
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
MODEL="$EMBER_SRC/models/demo"
[ -f "$MODEL/config.json" ] || { echo "SKIP: no demo model"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
field() { sed -E "s/.*\"$1\":\"?([^,\"}]*).*/\1/" <<<"$2"; }

printf 'In the beginning God created the heaven and the earth. And the earth was without form, and void.' >"$W/p.txt"
n=$("$EMBER_BIN" tokenize "$MODEL" "$(cat "$W/p.txt")" 2>/dev/null | tr -cs '0-9' '\n' | grep -c . || true)

j=$("$EMBER_BIN" bench "$MODEL" --prompt-file "$W/p.txt" --prompt-tokens 512 --gen-tokens 4 --json 2>&1)
check "a short file is the whole prompt" '[ "$(field prompt "$j")" = file ] && [ "$(field prompt_tokens "$j")" -ge 10 ] && [ "$(field prompt_tokens "$j")" -lt 64 ]'
[ "$n" -gt 0 ] && check "the prompt is the tokenizer's count ($n)" '[ "$(field prompt_tokens "$j")" = "$n" ]'
j=$("$EMBER_BIN" bench "$MODEL" --prompt-file "$W/p.txt" --prompt-tokens 5 --gen-tokens 4 --json 2>&1)
check "a long file is cut to --prompt-tokens" '[ "$(field prompt_tokens "$j")" = 5 ]'
j=$("$EMBER_BIN" bench "$MODEL" --prompt-tokens 8 --gen-tokens 4 --json 2>&1)
check "random ids without the option" '[ "$(field prompt "$j")" = random ] && [ "$(field prompt_tokens "$j")" = 8 ]'

j=$("$EMBER_BIN" bench "$MODEL" --cached 40 --prompt-tokens 47 --gen-tokens 2 --json 2>&1); rc=$?
check "--cached times the tail after an untimed prefix" '[ $rc = 0 ] && [ "$(field cached_tokens "$j")" = 40 ] && [ "$(field prompt_tokens "$j")" = 47 ] && awk "BEGIN{exit !($(field prefill_tps "$j") > 0)}"'
t=$("$EMBER_BIN" bench "$MODEL" --cached 40 --prompt-tokens 47 --gen-tokens 2 2>&1)
check "the text names the cached prefix" 'grep -q "prefill: 7 tokens after 40 cached" <<<"$t"'
j=$("$EMBER_BIN" bench "$MODEL" --prompt-tokens 40 --prefill-chunk 16 --gen-tokens 2 --json 2>&1); rc=$?
check "--prefill-chunk feeds the prompt in chunks of N" '[ $rc = 0 ] && [ "$(field prefill_chunk "$j")" = 16 ] && [ "$(field prompt_tokens "$j")" = 40 ] && awk "BEGIN{exit !($(field prefill_tps "$j") > 0)}"'
j=$("$EMBER_BIN" bench "$MODEL" --prompt-tokens 8 --gen-tokens 2 --json 2>&1)
check "the default chunk is 512, as generate feeds a prompt" '[ "$(field prefill_chunk "$j")" = 512 ]'
check "the roofline's bandwidth is the higher of the probes before and after the runs" \
  'python3 -c "import json,sys; d=json.loads(sys.argv[1]); p=d[\"bandwidth_probes_gbs\"]; sys.exit(not (len(p) == 2 and min(p) > 0 and d[\"bandwidth_gbs\"] == max(p)))" "$j"'
t=$("$EMBER_BIN" bench "$MODEL" --prompt-tokens 8 --gen-tokens 2 2>&1)
check "the text names both probes" 'grep -q "read bandwidth (the higher of [0-9.]* before and [0-9.]* after)" <<<"$t"'
e=$("$EMBER_BIN" bench "$MODEL" --prefill-chunk 0 2>&1); rc=$?
check "--prefill-chunk 0 is a usage error" '[ $rc = 2 ] && grep -q -- "--prefill-chunk" <<<"$e"'
e=$("$EMBER_BIN" bench "$MODEL" --cached 8 --prompt-tokens 8 2>&1); rc=$?
check "--cached must leave tokens to time" '[ $rc = 2 ] && grep -q "leaves no token" <<<"$e"'
e=$("$EMBER_BIN" bench "$MODEL" --cached 4 --spec mtp 2>&1); rc=$?
check "--cached with --spec is a usage error" '[ $rc = 2 ] && grep -q -- "--cached" <<<"$e"'
j=$("$EMBER_BIN" bench "$MODEL" --prompt-tokens 8 --gen-tokens 4 --batch 2 --temperature 0.8 --top-k 5 --json 2>&1); rc=$?
check "sampled decoding is measured (--temperature)" '[ $rc = 0 ] && awk "BEGIN{exit !($(field decode_tps "$j") > 0)}"'
e=$("$EMBER_BIN" bench "$MODEL" --spec mtp --temperature 0.5 2>&1); rc=$?
check "--spec with --temperature is a usage error" '[ $rc = 2 ] && grep -q "greedily" <<<"$e"'
e=$("$EMBER_BIN" bench "$MODEL" --warmup -1 2>&1); rc=$?
check "--warmup takes 0..100" '[ $rc = 2 ] && grep -q -- "--warmup" <<<"$e"'

: >"$W/empty.txt"
e=$("$EMBER_BIN" bench "$MODEL" --prompt-file "$W/empty.txt" --gen-tokens 4 2>&1); rc=$?
check "an empty file is an error" '[ $rc = 1 ] && grep -q "encodes to no tokens" <<<"$e"'
e=$("$EMBER_BIN" bench "$MODEL" --prompt-file "$W/missing.txt" --gen-tokens 4 2>&1); rc=$?
check "a missing file is an error naming it" '[ $rc = 1 ] && grep -q "missing.txt" <<<"$e"'
e=$("$EMBER_BIN" bench "$MODEL" --prompt-file 2>&1); rc=$?
check "the option needs a value" '[ $rc = 2 ]'
# A model whose vocabulary is smaller than the tokenizer's ids: refused, not read out of bounds.
Q="$EMBER_SRC/tests/golden/qwen3_5/q35_mtp_ratio3"
if [ -f "$Q/config.json" ]; then
  mkdir "$W/q" && cp "$Q"/config.json "$Q"/model.safetensors "$MODEL/tokenizer.json" "$W/q/"
  printf 'zebra quantum <|im_end|> xylophone' >"$W/big.txt"
  e=$("$EMBER_BIN" bench "$W/q" --prompt-file "$W/big.txt" --prompt-tokens 16 --gen-tokens 4 --spec mtp 2>&1); rc=$?
  check "ids outside the model's vocabulary are an error" '[ $rc = 1 ] && grep -q "outside the vocabulary" <<<"$e"'
  # text of single-byte tokens (ids < 320) drives speculative decoding from the file
  printf 'qxzj~^|`{}qxzj~^|`{}' >"$W/small.txt"
  j=$("$EMBER_BIN" bench "$W/q" --prompt-file "$W/small.txt" --prompt-tokens 16 --gen-tokens 12 --spec mtp --json 2>/dev/null)
  check "speculative decoding from a prompt file" '[ "$(field prompt_tokens "$(head -1 <<<"$j")")" = 16 ] && grep -q "\"acceptance_rate\"" <<<"$j"'
fi
[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
