#!/usr/bin/env bash
# The Anthropic Messages API over raw HTTP (curl) against a real `ember
# serve` on the scripted checkpoint: the exact SSE event sequence, a ping
# before the first block, count_tokens, both auth headers, and every
# malformed-input path answered with the right status and Anthropic's error
# shape {"type":"error","error":{"type","message"}}: 400 invalid_request_error,
# 401 authentication_error, 404 not_found_error, 413 request_too_large,
# 429 rate_limit_error, 529 overloaded_error (while the model loads).
set -u
command -v curl >/dev/null && command -v python3 >/dev/null || exit 77
WORK=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fails=0
check() { if eval "$2"; then :; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

. "$EMBER_SRC/tests/support/scripted_server.sh"
# One worker and one queue place, so a third concurrent generation gets
# 429; a short idle timeout makes silent streams ping every IDLE/2 s (longer
# under sanitizers, where a constrained non-streaming reply takes seconds).
IDLE=4; [ -n "${EMBER_SANITIZED:-}" ] && IDLE=10
scripted_server_launch "$WORK" '<think>Let me ping.</think><tool_call>{"arguments":{},"name":"ping"}</tool_call><|im_end|>' \
    --api-key k3y --max-concurrency 1 --queue 1 --max-body 65536 --timeout $IDLE
A=(-H 'x-api-key: k3y' -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json')
M='"model":"model","max_tokens":64'
U='"messages":[{"role":"user","content":"hello"}]'
TOOLS='"tools":[{"name":"ping","input_schema":{"type":"object","properties":{}}}]'
post() { curl -s "${A[@]}" "$B$1" -d "$2"; }
jq_() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# expect STATUS TYPE BODY [PATH] [MESSAGE-SUBSTRING]: the status and the exact
# error shape (the server writes compact JSON with keys in this order).
expect() {
  local out status body re
  out=$(curl -s -w '\n%{http_code}' "${A[@]}" "$B${4:-/v1/messages}" -d "$3")
  status=${out##*$'\n'}
  body=${out%$'\n'*}
  re='^\{"type":"error","error":\{"type":"'"$2"'","message":"(.*)"\}\}$'
  if [ "$status" != "$1" ] || ! [[ $body =~ $re ]] || [[ ${BASH_REMATCH[1]} != *"${5:-}"* ]]; then
    echo "FAIL: $3 -> $status $body (want $1 $2 ${5:-})"
    fails=$((fails + 1))
  fi
}

if [ "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")" != 200 ]; then
  expect 529 overloaded_error "{$M,$U}" /v1/messages "loading"
fi
scripted_server_ready

# A reply, streamed: the exact event sequence, "type" equal to the event name.
s=$(curl -s -N -D "$WORK/hdr" "${A[@]}" "$B/v1/messages" -d "{$M,$U,$TOOLS,\"stream\":true}")
seq=$(echo "$s" | python3 -c '
import json,sys
names,last=[],None
for l in sys.stdin:
    l=l.rstrip("\n")
    if l.startswith("event: "): last=l[7:]
    elif l.startswith("data: "):
        d=json.loads(l[6:]); assert d["type"]==last, (d, last)
        n=last
        if last=="content_block_start": n+=":%d:%s"%(d["index"],d["content_block"]["type"])
        if last=="content_block_delta": n=d["delta"]["type"]+":%d"%d["index"]
        if last=="content_block_stop": n+=":%d"%d["index"]
        if last=="message_delta": n+=":"+d["delta"]["stop_reason"]
        if n=="ping" and len(names)!=1: continue  # later keepalive pings may fall anywhere
        if not names or names[-1]!=n: names.append(n)  # runs of deltas count once
print(" ".join(names))')
want="message_start ping content_block_start:0:thinking thinking_delta:0 signature_delta:0 content_block_stop:0 content_block_start:1:tool_use input_json_delta:1 content_block_stop:1 message_delta:tool_use message_stop"
check "stream event sequence ($seq)" '[ "$seq" = "$want" ]'
check "stream content type" 'grep -qi "^content-type: text/event-stream" "$WORK/hdr"'
check "message_start usage" '[ "$(echo "$s" | grep -m1 "^data: {\"type\":\"message_start\"" | cut -c7- | jq_ "d[\"message\"][\"usage\"][\"input_tokens\"] > 0, d[\"message\"][\"content\"], d[\"message\"][\"stop_reason\"]")" = "True [] None" ]'

# Non-streaming: blocks, ids, stop reason; Bearer works as well as x-api-key.
r=$(curl -s -H 'Authorization: Bearer k3y' -H 'content-type: application/json' "$B/v1/messages" -d "{$M,$U,$TOOLS}")
check "tool_use reply" '[ "$(echo "$r" | jq_ "\",\".join(b[\"type\"] for b in d[\"content\"]), d[\"content\"][1][\"id\"][:6], d[\"content\"][1][\"input\"], d[\"stop_reason\"], d[\"id\"][:4]")" = "thinking,tool_use toolu_ {} tool_use msg_" ]'
# the prompt's size: computed tokens plus those read from the prefix cache
n=$(echo "$r" | jq_ 'd["usage"]["input_tokens"] + d["usage"]["cache_read_input_tokens"]')
check "count_tokens equals input_tokens + cache_read_input_tokens" '[ "$(post /v1/messages/count_tokens "{\"model\":\"model\",$U,$TOOLS}" | jq_ "d")" = "{'"'"'input_tokens'"'"': $n}" ]'
# Greedy and one call: the scripted model would otherwise keep adding calls
# (parallel calls are allowed by default) until max_tokens.
FT='"temperature":0,"tool_choice":{"type":"any","disable_parallel_tool_use":true}'
FN='"temperature":0,"tool_choice":{"type":"tool","name":"ping","disable_parallel_tool_use":true}'
check "tool_choice any / tool force the call" '[ "$(post /v1/messages "{$M,$U,$TOOLS,$FT}" | jq_ "d[\"stop_reason\"], d[\"content\"][-1][\"name\"]")" = "tool_use ping" ] && [ "$(post /v1/messages "{$M,$U,$TOOLS,$FN}" | jq_ "d[\"stop_reason\"], d[\"content\"][-1][\"name\"]")" = "tool_use ping" ]'
check "stop_sequence" '[ "$(post /v1/messages "{$M,$U,\"stop_sequences\":[\"name\"]}" | jq_ "d[\"stop_reason\"], d[\"stop_sequence\"]")" = "stop_sequence name" ]'

# Authentication and routing.
check "401 without a key" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$B/v1/messages" -d "{$M,$U}")" = 401 ]'
A_OK=("${A[@]}"); A=(-H 'x-api-key: nope' -H 'content-type: application/json')
expect 401 authentication_error "{$M,$U}"
expect 401 authentication_error "{\"model\":\"model\",$U}" /v1/messages/count_tokens
A=("${A_OK[@]}")
expect 404 not_found_error "{$M,$U}" /v1/messages/batches
expect 404 not_found_error "{\"model\":\"claude-x\",\"max_tokens\":8,$U}" /v1/messages "claude-x"
head -c 70000 /dev/zero | tr '\0' a >"$WORK/big"
big=$(curl -s -w '\n%{http_code}' "${A[@]}" --data-binary @"$WORK/big" "$B/v1/messages")
check "413 request_too_large" '[ "${big##*$'"'"'\n'"'"'}" = 413 ] && echo "${big%$'"'"'\n'"'"'*}" | grep -q "\"type\":\"request_too_large\""'

# Malformed requests: 400 invalid_request_error, each naming what is wrong.
E=invalid_request_error
expect 400 $E '{nope' /v1/messages "not valid JSON"
expect 400 $E '[1]' /v1/messages "JSON object"
expect 400 $E "{\"max_tokens\":8,$U}" /v1/messages "model: field required"
expect 400 $E "{\"model\":7,\"max_tokens\":8,$U}" /v1/messages "model"
expect 400 $E "{\"model\":\"model\",$U}" /v1/messages "max_tokens: field required"
expect 400 $E "{\"model\":\"model\",\"max_tokens\":0,$U}" /v1/messages "max_tokens"
expect 400 $E "{\"model\":\"model\",\"max_tokens\":\"8\",$U}" /v1/messages "max_tokens"
expect 400 $E "{\"model\":\"model\",\"max_tokens\":5000,$U}" /v1/messages "context"
expect 400 $E "{$M}" /v1/messages "messages: field required"
expect 400 $E "{$M,\"messages\":{}}" /v1/messages "messages"
expect 400 $E "{$M,\"messages\":[]}" /v1/messages "at least one"
expect 400 $E "{$M,\"messages\":[7]}" /v1/messages "messages.0"
expect 400 $E "{$M,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}" /v1/messages "messages.0"
expect 400 $E "{$M,\"messages\":[{\"content\":\"x\"}]}" /v1/messages "role"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":5}]}" /v1/messages "messages.0.content"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":[]}]}" /v1/messages "messages.0.content"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}" /v1/messages "messages.0.content.0"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}" /v1/messages "type"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}" /v1/messages "text"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AA==\"}}]}]}" /v1/messages "vision"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{}}]}]}" /v1/messages "document"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"image\"}]},{\"role\":\"user\",\"content\":\"b\"}]}" /v1/messages "messages.1.content.0"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"Sure\"}]}" /v1/messages "prefill"
TU='{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"ping","input":{}}]}'
expect 400 $E "{$M,\"messages\":[$TU,{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}" /v1/messages "tool_use_id"
expect 400 $E "{$M,\"messages\":[$TU,{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\"}]}]}" /v1/messages "toolu_2"
expect 400 $E "{$M,\"messages\":[$TU,{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"is_error\":1}]}]}" /v1/messages "is_error"
expect 400 $E "{$M,\"messages\":[$TU,{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":7}]}]}" /v1/messages "content"
expect 400 $E "{$M,\"messages\":[$TU,{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"image\"}]}]}]}" /v1/messages "vision"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"ping\",\"input\":[]}]},{\"role\":\"user\",\"content\":\"b\"}]}" /v1/messages "input"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"ping\",\"input\":{}}]},{\"role\":\"user\",\"content\":\"b\"}]}" /v1/messages "id"
expect 400 $E "{$M,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"}]},{\"role\":\"user\",\"content\":\"b\"}]}" /v1/messages "signature"
expect 400 $E "{$M,$U,\"system\":5}" /v1/messages "system"
expect 400 $E "{$M,$U,\"system\":[{\"type\":\"image\"}]}" /v1/messages "system.0"
expect 400 $E "{$M,$U,\"tools\":{}}" /v1/messages "tools"
expect 400 $E "{$M,$U,\"tools\":[{\"input_schema\":{}}]}" /v1/messages "tools.0"
expect 400 $E "{$M,$U,\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}]}" /v1/messages "name"
expect 400 $E "{$M,$U,\"tools\":[{\"name\":\"ping\"}]}" /v1/messages "input_schema"
expect 400 $E "{$M,$U,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}" /v1/messages "web_search_20250305"
expect 400 $E "{$M,$U,\"tool_choice\":{\"type\":\"any\"}}" /v1/messages "needs tools"
expect 400 $E "{$M,$U,$TOOLS,\"tool_choice\":{\"type\":\"tool\"}}" /v1/messages "tool_choice.name"
expect 400 $E "{$M,$U,$TOOLS,\"tool_choice\":{\"type\":\"tool\",\"name\":\"pong\"}}" /v1/messages "pong"
expect 400 $E "{$M,$U,$TOOLS,\"tool_choice\":{\"type\":\"sometimes\"}}" /v1/messages "tool_choice"
expect 400 $E "{$M,$U,$TOOLS,\"tool_choice\":\"auto\"}" /v1/messages "tool_choice"
expect 400 $E "{$M,$U,$TOOLS,\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":\"yes\"}}" /v1/messages "disable_parallel_tool_use"
expect 400 $E "{$M,$U,\"thinking\":{\"type\":\"enabled\"}}" /v1/messages "budget_tokens"
expect 400 $E "{\"model\":\"model\",\"max_tokens\":1500,$U,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100}}" /v1/messages "budget_tokens"
expect 400 $E "{$M,$U,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}" /v1/messages "less than max_tokens"
expect 400 $E "{$M,$U,\"thinking\":{\"type\":\"maybe\"}}" /v1/messages "thinking"
expect 400 $E "{$M,$U,\"thinking\":true}" /v1/messages "thinking"
expect 400 $E "{$M,$U,\"stop_sequences\":\"x\"}" /v1/messages "stop_sequences"
expect 400 $E "{$M,$U,\"stop_sequences\":[\"\"]}" /v1/messages "stop_sequences.0"
expect 400 $E "{$M,$U,\"temperature\":1.5}" /v1/messages "temperature"
expect 400 $E "{$M,$U,\"top_p\":\"x\"}" /v1/messages "top_p"
expect 400 $E "{$M,$U,\"top_k\":-1}" /v1/messages "top_k"
expect 400 $E "{$M,$U,\"metadata\":[]}" /v1/messages "metadata"
expect 400 $E "{$M,$U,\"metadata\":{\"session\":\"x\"}}" /v1/messages "session"
expect 400 $E "{$M,$U,\"stream\":\"yes\"}" /v1/messages "stream"
expect 400 $E "{$M,$U,\"service_tier\":\"priority\"}" /v1/messages "service_tier"
expect 400 $E "{$M,$U,\"output_format\":{\"type\":\"json_schema\"}}" /v1/messages "output_format"
expect 400 $E "{$M,$U}" /v1/messages/count_tokens "max_tokens"
expect 400 $E "{\"model\":\"model\"}" /v1/messages/count_tokens "messages"
expect 400 $E "{\"model\":\"model\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}" /v1/messages/count_tokens "vision"

# The one worker busy with a long stream, a second stream queued behind it:
# that one gets pings while it waits and survives the idle timeout; a third
# request gets 429. The long stream samples (seeded from the clock) and
# leaves the script at once; if a sampled token ends its turn before the
# third request, the worker was free after all: that attempt says nothing,
# and the scene is played again (at most 3 times).
for attempt in 1 2 3; do
  curl -s -N "${A[@]}" "$B/v1/messages" -d "{\"model\":\"model\",\"max_tokens\":1500,\"thinking\":{\"type\":\"disabled\"},$U,\"stream\":true}" >"$WORK/long" &
  LONG=$!
  for _ in $(seq 100); do grep -q content_block_start "$WORK/long" && break; sleep 0.05; done
  curl -s -N "${A[@]}" "$B/v1/messages" -d "{$M,$U,\"stream\":true}" >"$WORK/queued" &
  QUEUED=$!
  for _ in $(seq 100); do grep -q message_start "$WORK/queued" && break; sleep 0.05; done
  busy=$(curl -s -D "$WORK/h429" -w '\n%{http_code}' "${A[@]}" "$B/v1/messages" -d "{$M,$U}")
  grep -q '"stop_reason":"end_turn"' "$WORK/long" && [ $attempt -lt 3 ] || break
  echo "the long stream ended its turn early (attempt $attempt); again"
  wait "$LONG" "$QUEUED" 2>/dev/null
done
check "429 rate_limit_error with Retry-After" '[ "${busy##*$'"'"'\n'"'"'}" = 429 ] && echo "$busy" | grep -q "\"type\":\"rate_limit_error\"" && grep -qi "^retry-after:" "$WORK/h429"'
for _ in $(seq 100); do [ "$(grep -c "^event: ping" "$WORK/queued")" -ge 1 ] && break; sleep 0.05; done
# a ping before any content: the long stream may finish (1,500 tokens of a tiny
# model) and let the queued one start while this waits for its ping
first_ping=$(grep -n -m1 "^event: ping" "$WORK/queued" | cut -d: -f1)
first_block=$(grep -n -m1 "^event: content_block_start" "$WORK/queued" | cut -d: -f1)
check "pings while queued ($(grep -c "^event: ping" "$WORK/queued"))" '[ -n "$first_ping" ] && { [ -z "$first_block" ] || [ "$first_ping" -lt "$first_block" ]; }'
kill "$LONG" 2>/dev/null; wait "$LONG" 2>/dev/null
wait "$QUEUED"
check "the queued stream completes" '[ "$(grep "^event: " "$WORK/queued" | tail -2 | tr "\n" " ")" = "event: message_delta event: message_stop " ]'
check "server serves again after the client left" '[ "$(post /v1/messages "{$M,$U}" | jq_ "d[\"stop_reason\"]")" = end_turn ]'

kill -TERM "$SRV"; wait "$SRV"; rc=$?; SRV=""
check "clean exit (rc $rc)" '[ $rc = 0 ]'
[ $fails = 0 ] || { tail -20 "$WORK/log"; exit 1; }
echo "all Anthropic HTTP checks passed"
