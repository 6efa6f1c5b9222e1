#!/usr/bin/env bash
# End-to-end: a real `ember serve` on a free loopback port with a tiny Qwen3
# checkpoint (real tokenizer and chat template, scripted tool-call reply),
# driven with curl: chat (plain, streaming, tool calls, n, stop, seeds,
# logprobs, usage), completions, every error status, a client that
# disconnects mid-stream, 32 concurrent streams mixed with disconnects and
# malformed requests, and a clean SIGTERM exit.
set -u
command -v curl >/dev/null && command -v python3 >/dev/null || exit 77
TOK=$(bash "$EMBER_SRC/tests/support/fetch-npm-tokenizers.sh") || exit 77
WORK=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fails=0
check() { if eval "$2"; then :; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

# Chain: "\n" (end of the generation prompt) → <tool_call>{"arguments":{},"name":"ping"}</tool_call><|im_end|>
CHAIN=$("$EMBER_BIN" tokenize "$TOK/qwen3" $'\n<tool_call>{"arguments":{},"name":"ping"}</tool_call><|im_end|>' --no-special | tr -d '[] ')
python3 "$EMBER_SRC/tests/support/make_chat_checkpoint.py" "$WORK/model" "$TOK/qwen3" "$CHAIN" || exit 1

# Sanitized builds run several times slower: streams queued behind the load
# test must not be closed as idle connections meanwhile.
IDLE=30; [ -n "${EMBER_SANITIZED:-}" ] && IDLE=300
"$EMBER_BIN" serve "$WORK/model" --port 0 --api-key k3y --max-concurrency 4 --queue 64 --max-body 65536 \
    --timeout "$IDLE" >"$WORK/log" 2>&1 &
SRV=$!
for _ in $(seq 150); do grep -q "listening on" "$WORK/log" && break; sleep 0.1; done
B=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/log" | head -1)
[ -n "$B" ] || { cat "$WORK/log"; exit 1; }
for _ in $(seq 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")" = 200 ] && break; sleep 0.1; done
A=(-H 'Authorization: Bearer k3y' -H 'Content-Type: application/json')
post() { curl -s "${A[@]}" "$B$1" -d "$2"; }
code() { curl -s -o /dev/null -w '%{http_code}' "${A[@]}" "$B$1" -d "$2"; }
jq_() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
NT='"chat_template_kwargs":{"enable_thinking":false}'
U='"messages":[{"role":"user","content":"hello"}]'

# Tool call parsed from the scripted reply.
TOOLS='"tools":[{"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}]'
r=$(post /v1/chat/completions "{$U,$TOOLS,\"temperature\":0}")
check "tool call" '[ "$(echo "$r" | jq_ "d[\"choices\"][0][\"message\"][\"tool_calls\"][0][\"function\"][\"name\"], d[\"choices\"][0][\"finish_reason\"]")" = "ping tool_calls" ]'
s=$(curl -s -N "${A[@]}" "$B/v1/chat/completions" -d "{$U,$TOOLS,\"temperature\":0,\"stream\":true}")
check "streamed tool call deltas" 'echo "$s" | grep -q "\"tool_calls\":\[{\"index\":0" && echo "$s" | grep -q "\"finish_reason\":\"tool_calls\"" && echo "$s" | tail -2 | grep -q "data: \[DONE\]"'

# Plain text, greedy, usage, logprobs.
r=$(post /v1/chat/completions "{$U,$NT,\"temperature\":0,\"max_tokens\":12,\"logprobs\":true,\"top_logprobs\":3}")
check "usage" '[ "$(echo "$r" | jq_ "d[\"usage\"][\"completion_tokens\"], d[\"choices\"][0][\"finish_reason\"], len(d[\"choices\"][0][\"logprobs\"][\"content\"][0][\"top_logprobs\"])")" = "12 length 3" ]'
text=$(echo "$r" | jq_ 'd["choices"][0]["message"]["content"]')
# Streaming gives the same text; role first; usage chunk; [DONE].
s=$(curl -s -N "${A[@]}" "$B/v1/chat/completions" -d "{$U,$NT,\"temperature\":0,\"max_tokens\":12,\"stream\":true,\"stream_options\":{\"include_usage\":true}}")
st=$(echo "$s" | python3 -c '
import json,sys
out,role,usage=[],None,None
for l in sys.stdin:
    l=l.strip()
    if not l.startswith("data: ") or l=="data: [DONE]": continue
    d=json.loads(l[6:])
    if d.get("usage"): usage=d["usage"]["completion_tokens"]
    for c in d["choices"]:
        role=role or c["delta"].get("role")
        out.append(c["delta"].get("content") or "")
print(json.dumps(["".join(out),role,usage]))')
check "stream equals non-stream" '[ "$st" = "$(python3 -c "import json,sys; print(json.dumps([sys.argv[1],\"assistant\",12]))" "$text")" ]'
# Stop string: a piece of the greedy text ends the reply before it.
stop=$(python3 -c 'import sys; t=sys.argv[1]; print(t[len(t)//2:len(t)//2+3])' "$text")
want=$(python3 -c 'import sys; t,s=sys.argv[1],sys.argv[2]; print(t[:t.index(s)])' "$text" "$stop")
r=$(post /v1/chat/completions "$(python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"user","content":"hello"}],"chat_template_kwargs":{"enable_thinking":False},"temperature":0,"max_tokens":12,"stop":[sys.argv[1]]}))' "$stop")")
check "stop string" '[ "$(echo "$r" | jq_ "d[\"choices\"][0][\"message\"][\"content\"]")" = "$want" ] && [ "$(echo "$r" | jq_ "d[\"choices\"][0][\"finish_reason\"]")" = stop ]'
# Seeds reproduce; n choices differ.
a=$(post /v1/chat/completions "{$U,$NT,\"temperature\":1,\"seed\":7,\"max_tokens\":8,\"n\":2}")
b=$(post /v1/chat/completions "{$U,$NT,\"temperature\":1,\"seed\":7,\"max_tokens\":8,\"n\":2}")
ca=$(echo "$a" | jq_ '[c["message"]["content"] for c in d["choices"]]'); cb=$(echo "$b" | jq_ '[c["message"]["content"] for c in d["choices"]]')
check "seed reproduces" '[ "$ca" = "$cb" ]'
check "n=2 gives two different choices" '[ "$(echo "$a" | jq_ "len(d[\"choices\"]), d[\"choices\"][0][\"message\"][\"content\"] != d[\"choices\"][1][\"message\"][\"content\"]")" = "2 True" ]'
# Completions: list of prompts, logprobs, streaming.
r=$(post /v1/completions '{"prompt":["Hello","World"],"max_tokens":4,"temperature":0,"logprobs":2}')
check "completions" '[ "$(echo "$r" | jq_ "len(d[\"choices\"]), len(d[\"choices\"][1][\"logprobs\"][\"tokens\"]), d[\"usage\"][\"completion_tokens\"]")" = "2 4 8" ]'
s=$(curl -s -N "${A[@]}" "$B/v1/completions" -d '{"prompt":"Hello","max_tokens":3,"stream":true}')
check "completions stream" '[ "$(echo "$s" | grep -c "^data: {")" -ge 2 ] && echo "$s" | grep -q "data: \[DONE\]"'
check "models" '[ "$(curl -s "${A[@]}" "$B/v1/models" | jq_ "d[\"data\"][0][\"id\"]")" = model ] && [ "$(curl -s -o /dev/null -w "%{http_code}" "${A[@]}" "$B/v1/models/model")" = 200 ]'

# Error statuses.
check "401 no key" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$B/v1/models")" = 401 ]'
check "401 bad key" '[ "$(curl -s -o /dev/null -w "%{http_code}" -H "Authorization: Bearer nope" "$B/v1/models")" = 401 ]'
check "400 bad json" '[ "$(code /v1/chat/completions "{nope")" = 400 ]'
check "400 missing messages" '[ "$(code /v1/chat/completions "{}")" = 400 ]'
check "400 wrong type" '[ "$(code /v1/chat/completions "{$U,\"temperature\":\"x\"}")" = 400 ]'
check "400 context" '[ "$(code /v1/chat/completions "{$U,\"max_tokens\":100000}")" = 400 ]'
r=$(post /v1/chat/completions "{$U,$TOOLS,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"max_tokens\":200,\"temperature\":0}")
check "required tool_choice forces a call" '[ "$(echo "$r" | jq_ "d[\"choices\"][0][\"finish_reason\"]")" = tool_calls ]'
check "400 tool_choice without tools" '[ "$(code /v1/chat/completions "{$U,\"tool_choice\":\"required\"}")" = 400 ]'
check "400 json_schema" '[ "$(code /v1/chat/completions "{$U,\"response_format\":{\"type\":\"json_schema\"}}")" = 400 ]'
check "404 route" '[ "$(curl -s -o /dev/null -w "%{http_code}" "${A[@]}" "$B/v1/nothing")" = 404 ]'
check "404 model" '[ "$(code /v1/chat/completions "{$U,\"model\":\"gpt-4\"}")" = 404 ] && [ "$(curl -s -o /dev/null -w "%{http_code}" "${A[@]}" "$B/v1/models/x")" = 404 ]'
check "405" '[ "$(curl -s -o /dev/null -w "%{http_code}" "${A[@]}" -X GET "$B/v1/chat/completions")" = 405 ]'
head -c 70000 /dev/zero | tr '\0' a >"$WORK/big"
check "413" '[ "$(curl -s -o /dev/null -w "%{http_code}" "${A[@]}" --data-binary @"$WORK/big" "$B/v1/chat/completions")" = 413 ]'
shape=$(post /v1/chat/completions "{}" | python3 -c 'import json,sys; print(sorted(json.load(sys.stdin)["error"]))')
check "error shape" '[ "$shape" = "['"'"'code'"'"', '"'"'message'"'"', '"'"'param'"'"', '"'"'type'"'"']" ]'

# Load: 32 concurrent streams, 8 of them disconnect mid-stream, plus malformed requests.
for i in $(seq 32); do
  if [ $((i % 4)) = 0 ]; then
    timeout 0.3 curl -s -N "${A[@]}" "$B/v1/chat/completions" -d "{$U,$NT,\"max_tokens\":400,\"stream\":true}" >/dev/null &
  else
    curl -s -N "${A[@]}" "$B/v1/chat/completions" -d "{$U,$NT,\"max_tokens\":16,\"stream\":true}" >"$WORK/load.$i" &
  fi
  [ $((i % 8)) = 0 ] && curl -s -o /dev/null "${A[@]}" "$B/v1/chat/completions" -d '{"messages":[{"role":1}]' &
done
wait_clients() { for p in $(jobs -p); do [ "$p" != "$SRV" ] && wait "$p"; done; }
wait_clients
ok=0; for f in "$WORK"/load.*; do tail -2 "$f" | grep -q "data: \[DONE\]" && ok=$((ok + 1)); done
check "24 load streams complete ($ok)" '[ $ok = 24 ]'
[ $ok = 24 ] || for f in "$WORK"/load.*; do tail -2 "$f" | grep -q "data: \[DONE\]" || { echo "== $f"; head -c 600 "$f"; echo; }; done
check "server alive after load" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$B/health")" = 200 ]'
check "metrics" 'curl -s "${A[@]}" "$B/metrics" | grep -q "ember_requests_total{route=\"/v1/chat/completions\",status=\"200\"}"'
check "stats" '[ "$(curl -s "${A[@]}" "$B/stats" | jq_ "d[\"queue\"][\"running\"] >= 0 and d[\"tokens\"][\"generated\"] > 0")" = True ]'

# SIGTERM: exits 0 promptly.
kill -TERM "$SRV"
for _ in $(seq 150); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
wait "$SRV"; rc=$?; SRV=""
check "clean exit (rc $rc)" '[ $rc = 0 ]'

# SIGINT while the model is still loading: the load ends first, then the
# server stops and the process exits 0 (it once stopped the server under the
# loader, which then reported to it, and crashed).
"$EMBER_BIN" serve --port 0 >"$WORK/log2" 2>&1 &
P2=$!
for _ in $(seq 500); do grep -q "listening on" "$WORK/log2" && break; sleep 0.01; done
kill -INT "$P2"
wait "$P2"; rc=$?
check "SIGINT during the load: exit 0 (rc $rc)" '[ $rc = 0 ] && grep -q "stopped" "$WORK/log2"'
[ $fails = 0 ] || { tail -20 "$WORK/log"; tail -5 "$WORK/log2"; exit 1; }
echo "all server checks passed"
