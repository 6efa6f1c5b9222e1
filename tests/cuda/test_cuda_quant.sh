#!/usr/bin/env bash
# Quantized (MLX affine) checkpoints on the CUDA backend: (1) for every
# quant golden (mixed bits 2..8 and group sizes, quantized embedding and
# head), `ember logits --device cuda` matches the float64 reference of the
# dequantized weights and greedy decoding equals the CPU path's; (2) a
# Qwen3.5 golden quantized here at several widths (the hybrid path with
# quantized projections and embedding) gives the CPU's logits and greedy
# ids on the GPU, speculative decoding included. Skipped (77) when ember is
# built without CUDA or no GPU is present.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dev=${EMBER_TEST_CUDA_DEVICE:-cuda}
first=$(ls -d "$EMBER_SRC"/tests/golden/quant/*/ | head -n1)
if ! "$EMBER_BIN" logits "$first/quant" --ids 1 --out "$tmp/probe.bin" --device "$dev" 2>"$tmp/probe.err"; then
  if grep -q -e "built without CUDA" -e "no CUDA device" "$tmp/probe.err"; then
    echo "skipped: $(cat "$tmp/probe.err")"; exit 77
  fi
  cat "$tmp/probe.err"; exit 1
fi
fail=0
json() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); v=r[sys.argv[2]]; print(','.join(map(str, v)) if isinstance(v, list) else v)" "$1" "$2"; }
# same_greedy NAME DIR IDS N [extra generate flags]: greedy ids on $dev equal the CPU's
same_greedy() {
  local name=$1 d=$2 ids=$3 n=$4; shift 4
  local gen=(generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids --precision exact)
  local want got
  want=$("$EMBER_BIN" "${gen[@]}" --device cpu "$@")
  if ! got=$("$EMBER_BIN" "${gen[@]}" --device "$dev" "$@"); then echo "FAIL $name: generate on $dev failed"; return 1; fi
  if [ "$got" != "$want" ]; then echo "FAIL $name greedy on $dev${*:+ $*}: got [$got], cpu [$want]"; return 1; fi
  echo "ok   $name greedy on $dev${*:+ $*} equals cpu ($n tokens)"
}
for d in "$EMBER_SRC"/tests/golden/quant/*/; do
  name=$(basename "$d"); q="$d/quant"
  ids=$(json "$q/ref.json" ids)
  if ! "$EMBER_BIN" logits "$q" --ids "$ids" --out "$tmp/$name.bin" --device "$dev"; then
    echo "FAIL $name: ember logits on $dev failed"; fail=1; continue
  fi
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.bin" "$q/logits.bin" --rel 1e-5 --name "$name ($dev)" || fail=1
  same_greedy "$name" "$q" "$ids" "$(json "$q/ref.json" n_new)" || fail=1
done
# A hybrid checkpoint quantized at several widths (its hidden size, 96, takes groups of 32).
src="$EMBER_SRC/tests/golden/qwen3_5/q35_mtp_ratio3"
ids=$(json "$src/ref.json" ids)
for bits in 4 8 3 6; do
  name="q35_mtp_ratio3-q$bits"
  "$EMBER_BIN" quantize "$src" "$tmp/$name" --bits "$bits" --group-size 32 >/dev/null 2>&1 || { echo "FAIL $name: quantize failed"; fail=1; continue; }
  "$EMBER_BIN" logits "$tmp/$name" --ids "$ids" --out "$tmp/$name.cpu.bin" --device cpu
  if ! "$EMBER_BIN" logits "$tmp/$name" --ids "$ids" --out "$tmp/$name.gpu.bin" --device "$dev"; then
    echo "FAIL $name: ember logits on $dev failed"; fail=1; continue
  fi
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.gpu.bin" "$tmp/$name.cpu.bin" --rel 1e-5 --name "$name ($dev vs cpu)" || fail=1
  same_greedy "$name" "$tmp/$name" "$ids" 16 || fail=1
  same_greedy "$name" "$tmp/$name" "$ids" 16 --spec mtp --draft-tokens 2 || fail=1
done
exit $fail
