#!/usr/bin/env bash
# --kv-store: prompt prefix blocks (KV, and for hybrid models the recurrent
# state snapshots) persisted on disk and reused by a later process.
#  - generate (hybrid Qwen3.5 and dense goldens): a second process reuses
#    the prompt's blocks and prints the same greedy ids;
#  - corrupt, truncated, foreign and junk files are ignored with a warning,
#    never a crash, and the output stays the same;
#  - another model's store folder is not used;
#  - the folder stays within --kv-store-bytes;
#  - serve: after a restart a long prompt reports cached_tokens and the same
#    reply; /stats and /metrics show the store.
. "$EMBER_SRC/tests/support/serve_demo.sh"

Q35="$EMBER_SRC/tests/golden/qwen3_5/q35_tied_ratio2"
Q35B="$EMBER_SRC/tests/golden/qwen3_5/q35_equal_heads_bias"
DENSE="$EMBER_SRC/tests/golden/dense/qwen3_qknorm"
IDS=$(python3 -c 'print(",".join(str((i * 37 + 11) % 256) for i in range(300)))')
DIDS=$(python3 -c 'print(",".join(str((i * 41 + 5) % 352) for i in range(200)))')

gen() { # $1 model, $2 ids, $3 store, rest: options -> "cached ids" (stderr kept in $WORK/err)
  local model=$1 ids=$2 store=$3
  shift 3
  "$EMBER_BIN" generate "$model" --ids "$ids" --max-tokens 8 --print-ids --ignore-eos --temperature 0 \
    --kv-store "$store" --stats "$@" >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/err"; echo "FAILED"; return; }
  echo "$(sed -n 's/^prompt cache: \([0-9]*\) of.*/\1/p' "$WORK/err") $(tr -d '\n' <"$WORK/out")"
}
cached() { echo "$1" | cut -d' ' -f1; }
ids() { echo "$1" | cut -d' ' -f2-; }

S="$WORK/store"
cold=$("$EMBER_BIN" generate "$Q35" --ids "$IDS" --max-tokens 8 --print-ids --ignore-eos --temperature 0 2>/dev/null)
a1=$(gen "$Q35" "$IDS" "$S"); a2=$(gen "$Q35" "$IDS" "$S")
echo "hybrid: cold [$cold] first [$a1] second [$a2]"
check "hybrid: the first process computes the prompt" '[ "$(cached "$a1")" = 0 ] && [ "$(ids "$a1")" = "$cold" ]'
check "hybrid: a new process reuses 288 of 300 tokens from disk" '[ "$(cached "$a2")" = 288 ]'
check "hybrid: same ids after the restart" '[ "$(ids "$a2")" = "$cold" ]'
dir=$(ls -d "$S"/*/ | head -1)
n_files=$(ls "$dir" | wc -l)
check "hybrid: one file per prompt block ($n_files)" '[ "$n_files" = 9 ]'

# Corrupt one byte inside every file's KV: every file is rejected, the
# prompt is computed again and rewritten.
for f in "$dir"*.kvb; do
  printf '\x7f' | dd of="$f" bs=1 seek=4000 conv=notrunc status=none
done
c=$(gen "$Q35" "$IDS" "$S")
check "corrupt files are ignored: nothing reused, same ids" '[ "$(cached "$c")" = 0 ] && [ "$(ids "$c")" = "$cold" ]'
check "corrupt files are reported" 'grep -q "checksum mismatch" "$WORK/err"'
c=$(gen "$Q35" "$IDS" "$S")
check "rewritten after rejection: reused again" '[ "$(cached "$c")" = 288 ] && [ "$(ids "$c")" = "$cold" ]'

# Truncate the file that holds the last snapshot (the largest one): reuse
# falls back to the previous snapshot boundary, or none.
big=$(ls -S "$dir"*.kvb | head -1)
truncate -s 1000 "$big"
c=$(gen "$Q35" "$IDS" "$S")
check "truncated file is ignored, same ids" '[ "$(cached "$c")" -lt 288 ] && [ "$(ids "$c")" = "$cold" ] && grep -q "truncated" "$WORK/err"'
: >"$big"
c=$(gen "$Q35" "$IDS" "$S")
check "empty file is ignored, same ids" '[ "$(ids "$c")" = "$cold" ]'
head -c 200 /dev/urandom >"$dir/0123456789abcdef.kvb"
echo junk >"$dir/notes.txt"
c=$(gen "$Q35" "$IDS" "$S")
check "junk files in the folder change nothing" '[ "$(cached "$c")" = 288 ] && [ "$(ids "$c")" = "$cold" ]'

# Another model: its own folder; files copied over its own names are foreign.
coldb=$("$EMBER_BIN" generate "$Q35B" --ids "$IDS" --max-tokens 8 --print-ids --ignore-eos --temperature 0 2>/dev/null)
b1=$(gen "$Q35B" "$IDS" "$S")
check "another model does not use this store" '[ "$(cached "$b1")" = 0 ] && [ "$(ids "$b1")" = "$coldb" ]'
check "each model has its folder" '[ "$(ls -d "$S"/*/ | wc -l)" = 2 ]'
dirb=$(ls -d "$S"/*/ | grep -v "^$dir\$" | head -1)
for f in "$dirb"*.kvb; do cp "$dir$(basename "$f")" "$f" 2>/dev/null || cp "$big" "$f"; done
b2=$(gen "$Q35B" "$IDS" "$S")
check "foreign files are ignored, same ids" '[ "$(cached "$b2")" = 0 ] && [ "$(ids "$b2")" = "$coldb" ]'
check "foreign files are reported" 'grep -q "another model" "$WORK/err"'

# Dense model, and a bound on the folder's size.
D="$WORK/dense"
cd0=$("$EMBER_BIN" generate "$DENSE" --ids "$DIDS" --max-tokens 8 --print-ids --ignore-eos --temperature 0 2>/dev/null)
d1=$(gen "$DENSE" "$DIDS" "$D"); d2=$(gen "$DENSE" "$DIDS" "$D")
check "dense: reused from disk with the same ids" '[ "$(cached "$d1")" = 0 ] && [ "$(cached "$d2")" = 192 ] && [ "$(ids "$d2")" = "$cd0" ]'
one=$(ls -l "$D"/*/*.kvb | head -1 | awk "{print \$5}")
rm -rf "$D"
d3=$(gen "$DENSE" "$DIDS" "$D" --kv-store-bytes $((one * 3)))
total=$(du -cb "$D"/*/*.kvb | tail -1 | cut -f1)
check "the folder stays within --kv-store-bytes ($total <= $((one * 3)))" '[ "$total" -le $((one * 3)) ] && [ "$(ids "$d3")" = "$cd0" ]'
d4=$(gen "$DENSE" "$DIDS" "$D" --kv-store-bytes $((one * 3)))
check "a bounded store keeps the prefix head: reused 96" '[ "$(cached "$d4")" = 96 ] && [ "$(ids "$d4")" = "$cd0" ]'

# serve: restart with the same store.
LONG=$(python3 -c 'print(" ".join(["The quick brown fox jumps over the lazy dog."] * 40))')
req=$(python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"system","content":sys.argv[1]},{"role":"user","content":"Summarise."}],"temperature":0,"max_tokens":8}))' "$LONG")
ask() { curl -s "$B/v1/chat/completions" -H 'Content-Type: application/json' -d "$req" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); u=d["usage"]; print(u["prompt_tokens_details"]["cached_tokens"], json.dumps(d["choices"][0]["message"]["content"]))'; }
serve_demo --precision exact --kv-store "$WORK/serve-store"
first=$(ask)
kill "$SRV"; wait "$SRV" 2>/dev/null; SRV=""
serve_demo --precision exact --kv-store "$WORK/serve-store"
second=$(ask)
echo "serve: first [$first] after restart [$second]"
check "serve: first request computes its prompt" '[ "$(echo "$first" | cut -d" " -f1)" = 0 ]'
check "serve: after a restart the prompt comes from disk" '[ "$(echo "$second" | cut -d" " -f1)" -gt 300 ]'
check "serve: same reply after the restart" '[ "$(echo "$first" | cut -d" " -f2-)" = "$(echo "$second" | cut -d" " -f2-)" ]'
check "/stats shows the store" 'curl -s "$B/stats" | python3 -c "import json,sys; k=json.load(sys.stdin)[\"engine\"][\"kv_store\"]; assert k[\"blocks_loaded\"] > 9 and k[\"files\"] > 9, k"'
check "/metrics shows the store" 'curl -s "$B/metrics" | grep -q "^ember_kv_store_blocks_loaded_total [1-9]"'
echo "$fails failed"
[ $fails = 0 ]
