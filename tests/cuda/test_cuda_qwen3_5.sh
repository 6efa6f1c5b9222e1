#!/usr/bin/env bash
# Parity of the CUDA backend on the Qwen3.5 (Gated DeltaNet hybrid) family:
# for every golden checkpoint, (1) `ember logits --device cuda` matches the
# float64 reference logits as closely as the CPU path must (the 150-token
# references cross the 64-token chunk of the delta rule), (2) greedy
# decoding on the GPU produces the CPU path's ids, and (3) for checkpoints
# with a multi-token-prediction head, speculative decoding on the GPU
# (drafts, verification, rollback of the recurrent state) produces them too.
# Skipped (77) when ember is built without CUDA or no GPU is present.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dev=${EMBER_TEST_CUDA_DEVICE:-cuda}
first=$(ls -d "$EMBER_SRC"/tests/golden/qwen3_5/*/ | head -n1)
if ! "$EMBER_BIN" logits "$first" --ids 1 --out "$tmp/probe.bin" --device "$dev" 2>"$tmp/probe.err"; then
  if grep -q -e "built without CUDA" -e "no CUDA device" "$tmp/probe.err"; then
    echo "skipped: $(cat "$tmp/probe.err")"; exit 77
  fi
  cat "$tmp/probe.err"; exit 1
fi
fail=0
json() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); v=r[sys.argv[2]]; print(','.join(map(str, v)) if isinstance(v, list) else v)" "$1" "$2"; }
for d in "$EMBER_SRC"/tests/golden/qwen3_5/*/; do
  name=$(basename "$d")
  ids=$(json "$d/ref.json" ids)
  n=$(json "$d/ref.json" n_new)
  if ! "$EMBER_BIN" logits "$d" --ids "$ids" --out "$tmp/$name.bin" --device "$dev"; then
    echo "FAIL $name: ember logits on $dev failed"; fail=1; continue
  fi
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.bin" "$d/logits.bin" --rel 1e-5 --name "$name ($dev)" || fail=1
  gen=(generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids --precision exact)
  want=$("$EMBER_BIN" "${gen[@]}" --device cpu)
  got=$("$EMBER_BIN" "${gen[@]}" --device "$dev") || { echo "FAIL $name: generate on $dev failed"; fail=1; continue; }
  if [ "$got" != "$want" ]; then
    echo "FAIL $name greedy on $dev: got [$got], cpu [$want]"; fail=1
  else
    echo "ok   $name greedy on $dev equals cpu ($n tokens)"
  fi
  if [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('mtp_num_hidden_layers', 0))" "$d/config.json")" != 0 ]; then
    for k in 1 3; do
      got=$("$EMBER_BIN" "${gen[@]}" --spec mtp --draft-tokens "$k" --device "$dev") || { echo "FAIL $name: speculative generate on $dev failed"; fail=1; continue; }
      if [ "$got" != "$want" ]; then
        echo "FAIL $name speculative (k=$k) on $dev: got [$got], cpu [$want]"; fail=1
      else
        echo "ok   $name speculative (k=$k) on $dev equals cpu greedy"
      fi
    done
  fi
done
exit $fail
