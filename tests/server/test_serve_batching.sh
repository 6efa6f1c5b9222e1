#!/usr/bin/env bash
# The serving engine behind `ember serve` (demo model): concurrent greedy
# requests give the same replies as the same requests one at a time
# (continuous batching changes nothing), a repeated long prompt is served
# from the prefix cache (usage.prompt_tokens_details.cached_tokens), and
# /stats and /metrics show batching and cache figures.
. "$EMBER_SRC/tests/support/serve_demo.sh"
serve_demo --max-batch 6 --precision exact

ask() { # $1: question -> reply text (greedy)
  curl -s "$B/v1/chat/completions" -H 'Content-Type: application/json' -d "$(python3 -c '
import json,sys
print(json.dumps({"messages":[{"role":"user","content":sys.argv[1]}],"temperature":0,"max_tokens":40}))' "$1")" |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"]))'
}
QS=("What is the weather in Paris?" "Tell me about the sea." "Count to five." "Who are you?" "What is 2 plus 3?" "Say hello.")
for i in "${!QS[@]}"; do ask "${QS[$i]}" >"$WORK/serial.$i"; done
pids=()
for i in "${!QS[@]}"; do ask "${QS[$i]}" >"$WORK/conc.$i" & pids+=($!); done
wait "${pids[@]}"
same=1
for i in "${!QS[@]}"; do cmp -s "$WORK/serial.$i" "$WORK/conc.$i" || { same=0; echo "differs: ${QS[$i]}: $(cat "$WORK/serial.$i") vs $(cat "$WORK/conc.$i")"; }; done
check "concurrent replies equal serial ones" '[ $same = 1 ]'

LONG=$(python3 -c 'print(" ".join(["The quick brown fox jumps over the lazy dog."] * 40))')
req=$(python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"system","content":sys.argv[1]},{"role":"user","content":"Summarise."}],"temperature":0,"max_tokens":8}))' "$LONG")
cached() { curl -s "$B/v1/chat/completions" -H 'Content-Type: application/json' -d "$req" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); u=d["usage"]; print(u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], json.dumps(d["choices"][0]["message"]["content"]))'; }
first=$(cached); second=$(cached); echo "first: $first"; echo "second: $second"
check "first long prompt is computed" '[ "$(echo "$first" | cut -d" " -f2)" = 0 ]'
check "second long prompt reuses the cache" '[ "$(echo "$second" | cut -d" " -f2)" -gt 300 ]'
check "cached reply equals computed reply" '[ "$(echo "$first" | cut -d" " -f3-)" = "$(echo "$second" | cut -d" " -f3-)" ]'
# The same prompt through the Responses and Messages APIs reports the reuse in their own terms.
prompt_n=$(echo "$first" | cut -d" " -f1)
rreq=$(python3 -c 'import json,sys; print(json.dumps({"input":[{"role":"system","content":sys.argv[1]},{"role":"user","content":"Summarise."}],"temperature":0,"max_output_tokens":8}))' "$LONG")
rc=$(curl -s "$B/v1/responses" -H 'Content-Type: application/json' -d "$rreq" | python3 -c 'import json,sys; u=json.load(sys.stdin)["usage"]; print(u["input_tokens"], u["input_tokens_details"]["cached_tokens"])')
echo "responses: $rc"
check "Responses report cached input tokens" '[ "$(echo "$rc" | cut -d" " -f2)" -gt 300 ] && [ "$(echo "$rc" | cut -d" " -f1)" = "$prompt_n" ]'
areq=$(python3 -c 'import json,sys; print(json.dumps({"model":"demo","system":sys.argv[1],"messages":[{"role":"user","content":"Summarise."}],"temperature":0,"max_tokens":8}))' "$LONG")
ac=$(curl -s "$B/v1/messages" -H 'Content-Type: application/json' -d "$areq" | python3 -c 'import json,sys; u=json.load(sys.stdin)["usage"]; print(u["input_tokens"], u["cache_read_input_tokens"])')
echo "messages: $ac"
check "Messages report cache reads, input_tokens the rest" '[ "$(echo "$ac" | cut -d" " -f2)" -gt 300 ] && [ $(( $(echo "$ac" | cut -d" " -f1) + $(echo "$ac" | cut -d" " -f2) )) = "$prompt_n" ]'
st=$(curl -s "$B/stats")
check "/stats shows prefix hits and batching" 'echo "$st" | python3 -c "import json,sys; e=json.load(sys.stdin)[\"engine\"]; assert e[\"prefix_cache\"][\"hit_tokens\"] > 300 and e[\"batching\"][\"steps\"] > 0 and e[\"batching\"][\"mean_tokens_per_step\"] >= 1"'
check "/metrics shows prefix hits" 'curl -s "$B/metrics" | grep -q "^ember_prefix_cache_hit_tokens_total [1-9]"'
echo "$fails failed"
[ $fails = 0 ]
