#!/usr/bin/env bash
# ppl and kl on the demo model: a model against itself has zero KL and full
# top-1 agreement; an 8-bit copy is close but not identical; a 2-bit copy is
# far; ppl matches the reference perplexity kl reports; bad input is refused.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
demo="$EMBER_SRC/models/demo"
[ -f "$demo/model.safetensors" ] || exit 77
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
text="$demo/README.md"
fail=0
field() { sed -E "s/.*$1 ([0-9.e+-]+).*/\1/" <<<"$2"; }
self=$("$EMBER_BIN" kl "$demo" "$demo" --text "$text" --max-tokens 96 --ctx 64)
echo "$self"
python3 -c "import sys; sys.exit(0 if float('$(field 'kl mean' "$self")') < 1e-9 and float('$(field agreement "$self")') == 1.0 else 1)" \
  && echo "ok   self: zero KL, full agreement" || { echo "FAIL self"; fail=1; }
"$EMBER_BIN" quantize "$demo" "$tmp/q8" --bits 8 2>/dev/null
"$EMBER_BIN" quantize "$demo" "$tmp/q2" --bits 2 --group-size 32 2>/dev/null
k8=$("$EMBER_BIN" kl "$demo" "$tmp/q8" --text "$text" --max-tokens 96 --ctx 64); echo "$k8"
k2=$("$EMBER_BIN" kl "$demo" "$tmp/q2" --text "$text" --max-tokens 96 --ctx 64); echo "$k2"
python3 -c "
import sys
a, b = float('$(field 'kl mean' "$k8")'), float('$(field 'kl mean' "$k2")')
sys.exit(0 if 0 < a < 0.05 and b > 10 * a else 1)" && echo "ok   8-bit close, 2-bit far" || { echo "FAIL kl ordering"; fail=1; }
p=$("$EMBER_BIN" ppl "$demo" --text "$text" --max-tokens 96 --ctx 64); echo "$p"
python3 -c "
import sys
p, r = float('$(field ppl "$p")'), float('$(field 'ppl reference' "$self")')
sys.exit(0 if abs(p - r) <= 1e-3 * r else 1)" && echo "ok   ppl agrees with kl's reference perplexity" || { echo "FAIL ppl"; fail=1; }
if "$EMBER_BIN" ppl "$demo" --text "$tmp/none.txt" 2>/dev/null; then echo "FAIL missing text accepted"; fail=1; fi
if "$EMBER_BIN" kl "$demo" "$EMBER_SRC/tests/golden/dense/llama_linear" --text "$text" 2>/dev/null; then
  echo "FAIL different vocabularies accepted"; fail=1; else echo "ok   refusals"; fi
exit $fail
