#!/usr/bin/env bash
# Tensor parallelism on two GPUs for the Llama family: for every golden dense
# checkpoint that splits over two GPUs, (1) `ember logits --tensor-parallel 2`
# matches the float64 reference logits as closely as one GPU must, and
# matches `--tensor-parallel 1`; (2) greedy generations are equal; shapes that
# cannot be split are refused with a message saying why. Then a batched
# bench run reports the all-reduce time per step. Skipped (77) without CUDA
# or with fewer than two GPUs.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
first=$(ls -d "$EMBER_SRC"/tests/golden/dense/*/ | head -n1)
if ! "$EMBER_BIN" logits "$first" --ids 1 --out "$tmp/probe.bin" --device cuda --tensor-parallel 2 2>"$tmp/probe.err"; then
  if grep -q -e "built without CUDA" -e "no CUDA device" -e "GPU(s) found" "$tmp/probe.err"; then
    echo "skipped: $(cat "$tmp/probe.err")"; exit 77
  fi
  cat "$tmp/probe.err"; exit 1
fi
fail=0
for d in "$EMBER_SRC"/tests/golden/dense/*/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  if ! "$EMBER_BIN" logits "$d" --ids "$ids" --out "$tmp/$name.tp2.bin" --device cuda --tensor-parallel 2 2>"$tmp/$name.err"; then
    if grep -q -e "not divisible by 2" -e "neither split nor replicated" "$tmp/$name.err"; then
      echo "ok   $name refused: $(cat "$tmp/$name.err")"; continue
    fi
    echo "FAIL $name: $(cat "$tmp/$name.err")"; fail=1; continue
  fi
  "$EMBER_BIN" logits "$d" --ids "$ids" --out "$tmp/$name.tp1.bin" --device cuda --tensor-parallel 1
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.tp2.bin" "$d/logits.bin" --rel 1e-5 \
    --name "$name (tp 2 vs float64)" || fail=1
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.tp2.bin" "$tmp/$name.tp1.bin" --rel 1e-5 \
    --name "$name (tp 2 vs tp 1)" || fail=1
  n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_new'])" "$d/ref.json")
  want=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids --device cuda)
  got=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids \
        --device cuda --tensor-parallel 2)
  if [ "$got" != "$want" ]; then
    echo "FAIL $name greedy with tp 2: got [$got], tp 1 [$want]"; fail=1
  else
    echo "ok   $name greedy with tp 2 equals tp 1 ($n tokens)"
  fi
done
# several sequences per step (the batched attention and block tables of
# every rank), with the all-reduce figure
out=$("$EMBER_BIN" bench "$first" --device cuda --tensor-parallel 2 --prompt-tokens 40 --gen-tokens 16 --batch 4)
echo "$out"
if ! grep -q "all-reduce [0-9.]* ms per decode step" <<<"$out"; then
  echo "FAIL bench --tensor-parallel 2 printed no all-reduce figure"; fail=1
fi
# refusals
if "$EMBER_BIN" logits "$first" --ids 1 --out "$tmp/x.bin" --device cpu --tensor-parallel 2 2>"$tmp/cpu.err" ||
   ! grep -q "needs --device cuda" "$tmp/cpu.err"; then
  echo "FAIL --device cpu --tensor-parallel 2 was not refused clearly: $(cat "$tmp/cpu.err")"; fail=1
fi
if "$EMBER_BIN" logits "$first" --ids 1 --out "$tmp/x.bin" --device cuda --tensor-parallel 64 2>"$tmp/many.err" ||
   ! grep -q -e "GPU(s) found" -e "not divisible" "$tmp/many.err"; then
  echo "FAIL --tensor-parallel 64 was not refused clearly: $(cat "$tmp/many.err")"; fail=1
fi
exit $fail
