#!/usr/bin/env bash
# tools/llama2c/convert.py, which turns llama2.c checkpoints into the snapshot
# bench/stories_rotation.sh measures rotation on: on a random llama2.c model
# and tokenizer.bin (tests/support/llama2c_synth.py), the converted snapshot
# tokenizes as llama2.c's run.c encodes (dummy prefix, byte fallback, merges
# by score) and its logits are run.c's forward (adjacent-pair RoPE on the
# unpermuted weights), within f32 tolerance; rotated at f32 (hidden size 144,
# a Hadamard order of two Paley factors) it keeps those logits. Malformed
# checkpoints are refused with the file and the field named.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
synth="$EMBER_SRC/tests/support/llama2c_synth.py" conv="$EMBER_SRC/tools/llama2c/convert.py"
fail=0
python3 "$synth" write "$tmp"
python3 "$conv" "$tmp/model.bin" "$tmp/tokenizer.bin" "$tmp/hf" >/dev/null

for text in "once upon a time the cat ate" "a zebra" "the  time"; do
  want=$(python3 "$synth" encode "$tmp" "$text")
  got=$("$EMBER_BIN" tokenize "$tmp/hf" "$text")
  if [ "$(tr -d ' ' <<<"$got")" = "$(tr -d ' ' <<<"$want")" ]; then echo "ok   tokenize \"$text\": $got"
  else echo "FAIL tokenize \"$text\": ember $got, llama2.c $want"; fail=1; fi
done

ids=$(python3 "$synth" encode "$tmp" "once upon a time" | tr -d '[] ')
python3 "$synth" logits "$tmp" "$ids" "$tmp/want.bin"
"$EMBER_BIN" logits "$tmp/hf" --ids "$ids" --out "$tmp/got.bin"
python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/got.bin" "$tmp/want.bin" --rel 1e-5 --name "converted" || fail=1
"$EMBER_BIN" quantize "$tmp/hf" "$tmp/rot" --rotate --bits none --dtype f32 2>/dev/null
"$EMBER_BIN" logits "$tmp/rot" --ids "$ids" --out "$tmp/rot.bin"
python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/rot.bin" "$tmp/want.bin" --rel 1e-5 --name "rotated (R1 of order 144)" || fail=1

# refusals: a truncated file, a header field out of range, a tokenizer of the wrong size
head -c 100000 "$tmp/model.bin" >"$tmp/short.bin"
python3 - "$tmp/model.bin" "$tmp/badheads.bin" <<'PY'
import sys
d = bytearray(open(sys.argv[1], "rb").read())
d[12:16] = (7).to_bytes(4, "little", signed=True)  # n_heads 7 does not divide 144
open(sys.argv[2], "wb").write(d)
PY
head -c -3 "$tmp/tokenizer.bin" >"$tmp/shorttok.bin"  # the last piece cut short
refuse() {
  local what=$1 want=$2; shift 2
  if out=$(python3 "$conv" "$@" "$tmp/out_$what" 2>&1); then echo "FAIL $what: accepted"; fail=1
  elif grep -q -- "$want" <<<"$out"; then echo "ok   $what refused: $out"
  else echo "FAIL $what: message without \"$want\": $out"; fail=1; fi
  [ ! -e "$tmp/out_$what/model.safetensors" ] || { echo "FAIL $what: wrote a model"; fail=1; }
}
refuse truncated "short.bin: .* needs bytes" "$tmp/short.bin" "$tmp/tokenizer.bin"
refuse heads "badheads.bin: dim 144, n_heads 7" "$tmp/badheads.bin" "$tmp/tokenizer.bin"
refuse tokenizer "shorttok.bin: token [0-9]* has length" "$tmp/model.bin" "$tmp/shorttok.bin"
exit $fail
