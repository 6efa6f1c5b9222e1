#!/usr/bin/env bash
# Tensor parallelism on two GPUs for the Llama and Qwen3.5 families: for every
# golden dense and Qwen3.5 checkpoint that splits over two GPUs, (1) `ember
# logits --tensor-parallel 2`
# matches the float64 reference logits as closely as one GPU must, and
# matches `--tensor-parallel 1`; (2) greedy generations are equal; shapes that
# cannot be split are refused with a message saying why. Then a batched
# bench run reports the all-reduce time per step, and the multi-process path
# (one process per GPU, rendezvous on loopback) gives the same logits and
# ids, and fails within its timeout when a rank is missing or dies. Skipped
# (77) without CUDA or with fewer than two GPUs.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d); trap 'for p in ${s0:-} ${s1:-}; do stop KILL "$p"; done; rm -rf "$tmp"' EXIT
first=$(ls -d "$EMBER_SRC"/tests/golden/dense/*/ | head -n1)
if ! "$EMBER_BIN" logits "$first" --ids 1 --out "$tmp/probe.bin" --device cuda --tensor-parallel 2 2>"$tmp/probe.err"; then
  if grep -q -e "built without CUDA" -e "no CUDA device" -e "GPU(s) found" "$tmp/probe.err"; then
    echo "skipped: $(cat "$tmp/probe.err")"; exit 77
  fi
  cat "$tmp/probe.err"; exit 1
fi
fail=0
for d in "$EMBER_SRC"/tests/golden/dense/*/ "$EMBER_SRC"/tests/golden/qwen3_5/*/; do
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
  # decode steps recorded as CUDA graphs (1) and run one operation at a time (0)
  for graphs in 1 0; do
    got=$(EMBER_CUDA_GRAPHS=$graphs "$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 \
          --ignore-eos --print-ids --device cuda --tensor-parallel 2)
    if [ "$got" != "$want" ]; then
      echo "FAIL $name greedy with tp 2 (graphs $graphs): got [$got], tp 1 [$want]"; fail=1
    else
      echo "ok   $name greedy with tp 2 (graphs $graphs) equals tp 1 ($n tokens)"
    fi
  done
done
# prefill over several KV blocks, then batched decode steps (recorded) of two
# sequences: every golden that splits, one GPU against two (Qwen3.5: with a
# rollback into a verified span and a snapshot restored)
for t in test_dense_tp test_qwen3_5_tp; do
  if [ -x "${EMBER_BUILD:-}/tests/$t" ]; then
    "$EMBER_BUILD/tests/$t" --device cuda --ranks 2 || { echo "FAIL $t on cuda"; fail=1; }
  fi
done
# several sequences per step (the batched attention and block tables of
# every rank), with the all-reduce figure (timed when steps are not recorded)
out=$(EMBER_CUDA_GRAPHS=0 "$EMBER_BIN" bench "$first" --device cuda --tensor-parallel 2 --prompt-tokens 40 \
      --gen-tokens 16 --batch 4)
echo "$out"
if ! grep -q "all-reduce [0-9.]* ms per decode step" <<<"$out"; then
  echo "FAIL bench --tensor-parallel 2 printed no all-reduce figure"; fail=1
fi
# the same batch with recorded decode steps
if ! "$EMBER_BIN" bench "$first" --device cuda --tensor-parallel 2 --prompt-tokens 40 --gen-tokens 16 --batch 4; then
  echo "FAIL bench --tensor-parallel 2 --batch 4 with recorded steps"; fail=1
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
# one process per GPU: rank 1 runs what rank 0 sends
port=$((20000 + RANDOM % 20000))
# (the Qwen3.5 family splits in one process only: refused before any rendezvous)
q35=$(ls -d "$EMBER_SRC"/tests/golden/qwen3_5/*/ | head -n1)
if EMBER_WORLD_SIZE=2 EMBER_RANK=0 EMBER_MASTER_ADDR=127.0.0.1 EMBER_MASTER_PORT=$port EMBER_TP_TIMEOUT=5 \
     "$EMBER_BIN" logits "$q35" --ids 1 --out "$tmp/x.bin" --device cuda:0 2>"$tmp/q35mp.err" ||
   ! grep -q "one process only" "$tmp/q35mp.err"; then
  echo "FAIL Qwen3.5 with one process per rank was not refused clearly: $(cat "$tmp/q35mp.err")"; fail=1
fi
mp() { # rank, device, verb args...
  local rank=$1 dev=$2; shift 2
  EMBER_WORLD_SIZE=2 EMBER_RANK=$rank EMBER_MASTER_ADDR=127.0.0.1 EMBER_MASTER_PORT=$port EMBER_TP_TIMEOUT=20 \
    "$EMBER_BIN" "$@" --device "$dev"
}
# `mp ... &` runs in a subshell: $! may be that shell, with ember its child.
# Signals go to both, so the ember process itself stops.
stop() { # signal, pid of a backgrounded mp
  pkill "-$1" -P "$2" 2>/dev/null || true
  kill "-$1" "$2" 2>/dev/null || true
  wait "$2" 2>/dev/null || true
}
for d in "$EMBER_SRC"/tests/golden/dense/llama_gqa_tied/ "$EMBER_SRC"/tests/golden/dense/qwen2_bias/; do
  name=$(basename "$d")
  ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/ref.json")
  mp 1 cuda:1 logits "$d" --ids "$ids" --out "$tmp/unused.bin" 2>"$tmp/r1.err" & r1=$!
  if ! mp 0 cuda:0 logits "$d" --ids "$ids" --out "$tmp/$name.mp.bin"; then echo "FAIL $name: rank 0 of 2 processes"; fail=1; fi
  if ! wait $r1; then echo "FAIL $name: rank 1 of 2 processes: $(cat "$tmp/r1.err")"; fail=1; fi
  python3 "$EMBER_SRC/tests/support/compare_logits.py" "$tmp/$name.mp.bin" "$tmp/$name.tp1.bin" --rel 1e-5 \
    --name "$name (2 processes vs tp 1)" || fail=1
  n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_new'])" "$d/ref.json")
  want=$("$EMBER_BIN" generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos --print-ids --device cuda)
  # decode steps recorded as CUDA graphs in each process (1), and not (0)
  for graphs in 1 0; do
    EMBER_CUDA_GRAPHS=$graphs mp 1 cuda:1 generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos \
      --print-ids >/dev/null 2>"$tmp/r1.err" & r1=$!
    got=$(EMBER_CUDA_GRAPHS=$graphs mp 0 cuda:0 generate "$d" --ids "$ids" --max-tokens "$n" --temperature 0 \
          --ignore-eos --print-ids) || fail=1
    wait $r1 || { echo "FAIL $name: rank 1 of 2 processes: $(cat "$tmp/r1.err")"; fail=1; }
    if [ "$got" != "$want" ]; then
      echo "FAIL $name greedy with 2 processes (graphs $graphs): got [$got], tp 1 [$want]"; fail=1
    else
      echo "ok   $name greedy with 2 processes (graphs $graphs) equals tp 1"
    fi
  done
done
# a rank that never comes: rank 0 stops with an error naming it
start=$(date +%s)
if EMBER_TP_TIMEOUT=3 mp 0 cuda:0 logits "$first" --ids 1 --out "$tmp/x.bin" 2>"$tmp/alone.err"; then
  echo "FAIL rank 0 without rank 1 succeeded"; fail=1
elif ! grep -q "never came" "$tmp/alone.err" || [ $(( $(date +%s) - start )) -gt 30 ]; then
  echo "FAIL rank 0 without rank 1: $(cat "$tmp/alone.err")"; fail=1
else
  echo "ok   rank 0 alone stops: $(cat "$tmp/alone.err")"
fi
# a rank that dies while serving: rank 0's next step fails within the timeout
hport=$((20000 + RANDOM % 20000))
demo="$EMBER_SRC/models/demo"
EMBER_TP_TIMEOUT=5 mp 1 cuda:1 serve "$demo" --port "$hport" 2>"$tmp/s1.err" & s1=$!
EMBER_TP_TIMEOUT=5 mp 0 cuda:0 serve "$demo" --port "$hport" 2>"$tmp/s0.err" & s0=$!
for _ in $(seq 1 120); do grep -q "ready:" "$tmp/s0.err" && break; sleep 0.5; done
body='{"model":"demo","prompt":"hello","max_tokens":4,"temperature":0}'
if ! curl -sf --max-time 60 "http://127.0.0.1:$hport/v1/completions" -H 'content-type: application/json' -d "$body" >/dev/null; then
  echo "FAIL serve with 2 processes: $(tail -5 "$tmp/s0.err")"; fail=1
fi
stop KILL $s1
start=$(date +%s)
curl -s --max-time 60 "http://127.0.0.1:$hport/v1/completions" -H 'content-type: application/json' -d "$body" >"$tmp/after.json" || true
took=$(( $(date +%s) - start ))
if [ $took -gt 45 ] || ! grep -q -i "error" "$tmp/after.json"; then
  echo "FAIL serve after rank 1 died: took ${took}s: $(cat "$tmp/after.json")"; fail=1
else
  echo "ok   serve after rank 1 died answers an error in ${took}s"
fi
stop TERM $s0
exit $fail
