#!/usr/bin/env bash
# One set of weights in the three checkpoint layouts (transformers text, VL
# wrapper, mlx-lm conversion) gives identical logits; and the gain-shift rule
# is the reference one: artifacts that break it (an mlx conversion that kept
# mtp.* or the torch conv shape, a text checkpoint without the markers) are
# shifted wrongly and must give different logits.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
same() { cmp -s "$1" "$2"; }
for name in q35_tied_ratio2 q35_mtp_ratio3; do
  src="$EMBER_SRC/tests/golden/qwen3_5/$name"
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'][:40])))" "$src/ref.json")
  "$EMBER_BIN" logits "$src" --ids "$ids" --out "$tmp/$name.text.bin"
  modes="vl mlx mlx-torchconv text-nomtp"
  # an mlx conversion that kept mtp.* is only possible where there is an MTP head
  [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['mtp_layers'])" "$src/ref.json")" != 0 ] && modes="$modes mlx-mtp"
  for mode in $modes; do
    python3 "$EMBER_SRC/tests/qwen3_5/relayout.py" "$src" "$tmp/$name.$mode" "$mode"
    "$EMBER_BIN" logits "$tmp/$name.$mode" --ids "$ids" --out "$tmp/$name.$mode.bin"
    case $mode in
      vl|mlx) if same "$tmp/$name.text.bin" "$tmp/$name.$mode.bin"; then echo "ok   $name $mode: identical logits"
              else echo "FAIL $name $mode: logits differ from the text layout"; fail=1; fi ;;
      *)      if same "$tmp/$name.text.bin" "$tmp/$name.$mode.bin"; then echo "FAIL $name $mode: the shift rule was not applied"; fail=1
              else echo "ok   $name $mode: shifted by the reference rule (differs, as it must)"; fi ;;
    esac
  done
done
exit $fail
