#!/usr/bin/env bash
# Parity of the CUDA backend on the Llama family: for every golden dense
# checkpoint, (1) `ember logits --device cuda` matches the float64 reference
# logits as closely as the CPU path must (f32 activations), and (2) greedy
# decoding on the GPU produces the CPU path's ids, and (3) seeded sampling drawn
# on the GPU gives the tokens the host sampler draws from the same logits. Skipped (77) when ember
# is built without CUDA or no GPU is present.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dev=${EMBER_TEST_CUDA_DEVICE:-cuda}
first=$(ls -d "$EMBER_SRC"/tests/golden/dense/*/ | head -n1)
if ! "$EMBER_BIN" logits "$first" --ids 1 --out "$tmp/probe.bin" --device "$dev" 2>"$tmp/probe.err"; then
  if grep -q -e "built without CUDA" -e "no CUDA device" "$tmp/probe.err"; then
    echo "skipped: $(cat "$tmp/probe.err")"; exit 77
  fi
  cat "$tmp/probe.err"; exit 1
fi
fail=0
for d in "$EMBER_SRC"/tests/golden/dense/*/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  "$EMBER_BIN" logits "$d" --ids "$ids" --out "$tmp/$name.bin" --device "$dev"
  if ! python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.bin" "$d/logits.bin" --rel 1e-5 --name "$name ($dev)"; then
    fail=1
  fi
  n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_new'])" "$d/ref.json")
  want=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids --device cpu)
  got=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids --device "$dev")
  if [ "$got" != "$want" ]; then
    echo "FAIL $name greedy on $dev: got [$got], cpu [$want]"; fail=1
  else
    echo "ok   $name greedy on $dev equals cpu ($n tokens)"
  fi
  # seeded sampling: drawn on the device (only ids come back) or on the host
  # from the same GPU logits, the same uniforms give the same tokens
  for opts in "--temperature 0.8 --top-p 0.9" "--temperature 1.0 --top-k 20" "--temperature 0.7 --min-p 0.05"; do
    # shellcheck disable=SC2086
    dev_ids=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens 24 --ignore-eos --print-ids --seed 11 $opts --device "$dev")
    # shellcheck disable=SC2086
    host_ids=$(EMBER_DEVICE_SAMPLING=0 "$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens 24 --ignore-eos --print-ids --seed 11 $opts --device "$dev")
    if [ "$dev_ids" != "$host_ids" ]; then
      echo "FAIL $name sampled ($opts) on $dev: device draws [$dev_ids], host draws [$host_ids]"; fail=1
    else
      echo "ok   $name sampled ($opts): device draws equal host draws"
    fi
  done
done
exit $fail
