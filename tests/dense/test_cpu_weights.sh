#!/usr/bin/env bash
# Where the CPU's weights live (EMBER_CPU_WEIGHTS): copies on huge pages and
# the mapped files in place give the same bits (float and quantized
# checkpoints; f32 logits and FAST greedy ids), the log says which was
# used, a tied head's copy is shared with the embedding and a large
# tensor's file pages leave as it is copied (no second copy in the resident
# peak), and an unknown value is named in a warning.
set -uo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ids() { python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$1/ref.json"; }

# logits (f32 activations), then greedy ids with FAST products (int8 activations)
for d in "$EMBER_SRC/tests/golden/dense/llama_gqa_tied" "$EMBER_SRC/tests/golden/quant/mixed_untied/quant" \
         "$EMBER_SRC/tests/golden/quant/tied_3bit/quant"; do
  name=$(basename "$(dirname "$d")")/$(basename "$d")
  for mode in map copy; do
    EMBER_CPU_WEIGHTS=$mode EMBER_LOG_LEVEL=info "$EMBER_BIN" logits "$d" --ids "$(ids "$d")" --out "$tmp/$mode.bin" \
      2>"$tmp/log" || { echo "FAIL $name $mode: ember logits"; cat "$tmp/log"; fail=1; }
    case $mode in
      map) want="read in place" ;;
      copy) want="copied onto huge pages" ;;
    esac
    grep -q "CPU weights $want" "$tmp/log" || { echo "FAIL $name $mode: the log does not say '$want'"; cat "$tmp/log"; fail=1; }
    EMBER_CPU_WEIGHTS=$mode EMBER_PRECISION=fast "$EMBER_BIN" generate "$d" --ids "$(ids "$d")" --max-tokens 8 \
      --temperature 0 --ignore-eos --print-ids >"$tmp/$mode.ids" || { echo "FAIL $name $mode: ember generate"; fail=1; }
  done
  if cmp -s "$tmp/map.bin" "$tmp/copy.bin" && cmp -s "$tmp/map.ids" "$tmp/copy.ids" && [ -s "$tmp/map.ids" ]; then
    echo "ok   $name: copied weights give the mapped weights' logits bits and FAST greedy ids"
  else
    echo "FAIL $name: EMBER_CPU_WEIGHTS=map and =copy differ"; fail=1
  fi
done

# a tied head's 16 MiB embedding is copied once; an untied one is not
# copied at all (a run reads only its tokens' rows). Not under the
# sanitizers, whose allocator keeps freed memory resident (ASan's
# quarantine) and so moves the peaks (as test_fit_memory.sh)
peaks="1 0"
if [ -n "${EMBER_SANITIZED:-}" ]; then peaks=""; echo "skip resident peaks: sanitizers change resident memory"; fi
for tied in $peaks; do
  python3 "$EMBER_SRC/tests/support/make_synthetic_model.py" "$tmp/m$tied" 256 4 4 64 512 2 32768 BF16 $tied 512
  peak() {
    EMBER_CPU_WEIGHTS=$1 "$EMBER_BIN" generate "$tmp/m$tied" --ids 1,2,3 --max-tokens 2 --ignore-eos --threads 2 --stats \
      2>&1 >/dev/null | sed -n 's/^peak resident memory \([0-9]*\) bytes$/\1/p'
  }
  pm=$(peak map) pc=$(peak copy)
  if [ -n "$pm" ] && [ -n "$pc" ] && [ "$pc" -le $((pm + 8 * 1048576)) ]; then
    echo "ok   tied=$tied: resident peak $pc bytes copied, $pm mapped"
  else
    echo "FAIL tied=$tied: resident peak '$pc' bytes copied against '$pm' mapped (a second copy of the embedding?)"; fail=1
  fi
done

# an unknown value is named in a warning and the default (auto) taken
if ! EMBER_CPU_WEIGHTS=bogus "$EMBER_BIN" logits "$EMBER_SRC/tests/golden/dense/llama_gqa_tied" --ids 1,2 \
     --out "$tmp/x.bin" 2>"$tmp/err"; then
  echo "FAIL EMBER_CPU_WEIGHTS=bogus stopped ember logits"; cat "$tmp/err"; fail=1
elif grep -q "EMBER_CPU_WEIGHTS=bogus is not one of auto|copy|map" "$tmp/err"; then
  echo "ok   EMBER_CPU_WEIGHTS=bogus: $(head -1 "$tmp/err")"
else
  echo "FAIL EMBER_CPU_WEIGHTS=bogus: no warning naming the variable"; cat "$tmp/err"; fail=1
fi
exit $fail
