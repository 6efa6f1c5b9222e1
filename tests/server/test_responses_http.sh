#!/usr/bin/env bash
# /v1/responses over raw HTTP with curl against `ember serve` (demo model):
# malformed requests (each a 400/404 in OpenAI's error shape naming the
# parameter), routes and methods, the streamed event grammar, store=false,
# the response store's TTL and byte cap (LRU eviction, counted in /stats),
# concurrent creates, and persistence across a restart with
# --response-store-dir (files written atomically, reloaded, removed on delete).
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
command -v curl >/dev/null && command -v python3 >/dev/null || exit 77
MODEL="$EMBER_SRC/models/demo"
[ -f "$MODEL/config.json" ] || { echo "SKIP: no demo model"; exit 77; }
WORK=$(mktemp -d)
SRV=""
stop_server() { [ -n "$SRV" ] && kill -TERM "$SRV" 2>/dev/null && wait "$SRV"; local rc=$?; SRV=""; return $rc; }
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fails=0
check() { if eval "$2"; then :; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
start_server() {
  # A fresh log each time: the previous server's "listening on" line must not be read as this one's.
  rm -f "$WORK/log"
  "$EMBER_BIN" serve "$MODEL" --port 0 --api-key k "$@" >"$WORK/log" 2>&1 &
  SRV=$!
  for _ in $(seq 150); do grep -q "listening on" "$WORK/log" 2>/dev/null && break; sleep 0.1; done
  B=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/log" | head -1)
  for _ in $(seq 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")" = 200 ] && break; sleep 0.1; done
}
A=(-H 'Authorization: Bearer k' -H 'Content-Type: application/json')
post() { curl -s "${A[@]}" "$B/v1/responses" -d "$1"; }
get() { curl -s "${A[@]}" "$B$1"; }
code() { curl -s -o /dev/null -w '%{http_code}' "${A[@]}" "$@"; }
jq_() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# err BODY STATUS PARAM [WORD]: the status, OpenAI's error shape, the param, a word of the message.
err() {
  local out st
  out=$(curl -s -w '\n%{http_code}' "${A[@]}" "$B/v1/responses" -d "$1")
  st=$(echo "$out" | tail -1)
  echo "$out" | sed '$d' | python3 -c '
import json,sys
e=json.load(sys.stdin)["error"]
assert sorted(e)==["code","message","param","type"], e
assert e["param"]==sys.argv[1], (e["param"], sys.argv[1])
assert sys.argv[2].lower() in e["message"].lower(), e["message"]
' "$3" "${4:-}" && [ "$st" = "$2" ]
}
R='"temperature":0,"max_output_tokens":8'

start_server --response-store-bytes 6000
[ -n "$B" ] || { cat "$WORK/log"; exit 1; }

# ---- malformed requests ------------------------------------------------------
check "invalid JSON" '[ "$(code "$B/v1/responses" -d "{nope")" = 400 ]'
check "input missing" 'err "{}" 400 input required'
check "input a number" 'err "{\"input\":3}" 400 input'
check "item not an object" 'err "{\"input\":[1]}" 400 "input[0]"'
check "unknown item type" 'err "{\"input\":[{\"type\":\"computer_call\"}]}" 400 "input[0]" computer_call'
check "bad role" 'err "{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}" 400 "input[0].role" robot'
check "content missing" 'err "{\"input\":[{\"role\":\"user\"}]}" 400 "input[0].content"'
check "image part: no vision" 'err "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"https://x/y.png\"}]}]}" 400 "input[0].content[0]" "text only"'
check "video part (object url): no vision" 'err "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},{\"type\":\"input_video\",\"image_url\":{\"url\":\"x\"}}]}]}" 400 "input[0].content[1]" input_video'
check "system item with an image" 'err "{\"input\":[{\"role\":\"system\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}" 400 "input[0].content[0]" "text only"'
check "unknown part type named" 'err "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}" 400 "input[0].content[0]" hologram'
check "text part without text" 'err "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]}" 400 "input[0].content[0]"'
check "function_call incomplete" 'err "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}" 400 "input[0]" call_id'
check "function_call_output without call_id" 'err "{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}" 400 "input[0]" call_id'
check "only reasoning: no messages" 'err "{\"input\":[{\"type\":\"reasoning\",\"summary\":[]}]}" 400 input'
check "non-function tool" 'err "{\"input\":\"hi\",\"tools\":[{\"type\":\"file_search\"}]}" 400 "tools[0]" file_search'
check "tool without name" 'err "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\"}]}" 400 "tools[0]" name'
check "tool_choice required without tools is a 400" '[ "$(curl -s -o /dev/null -w "%{http_code}" "${A[@]}" "$B/v1/responses" -d "{\"input\":\"hi\",\"tool_choice\":\"required\"}")" = 400 ]'
check "json_schema format gives a conforming object" 'post "{\"input\":\"hi\",\"temperature\":1,\"max_output_tokens\":200,\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"n\"],\"additionalProperties\":false}}}}" | python3 -c "import json,sys; r=json.load(sys.stdin); t=[c[\"text\"] for o in r[\"output\"] if o[\"type\"]==\"message\" for c in o[\"content\"]][0]; v=json.loads(t); assert list(v)==[\"n\"] and 0<=v[\"n\"]<=99, t"'
check "json_schema format without a schema" 'err "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\"}}}" 400 text.format.schema schema'
check "bad effort" 'err "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"max\"}}" 400 reasoning.effort'
check "metadata value not a string" 'err "{\"input\":\"hi\",\"metadata\":{\"a\":1}}" 400 metadata'
check "temperature range" 'err "{\"input\":\"hi\",\"temperature\":3}" 400 temperature'
check "max_output_tokens type" 'err "{\"input\":\"hi\",\"max_output_tokens\":\"many\"}" 400 max_output_tokens'
check "context exceeded" 'err "{\"input\":\"hi\",\"max_output_tokens\":100000}" 400 input context'
check "background" 'err "{\"input\":\"hi\",\"background\":true}" 400 background'
check "unknown previous id" 'err "{\"input\":\"hi\",\"previous_response_id\":\"resp_nope\"}" 404 previous_response_id "not found"'
check "unknown model" 'err "{\"input\":\"hi\",\"model\":\"gpt-5\"}" 404 model'
check "401" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$B/v1/responses/resp_x")" = 401 ]'
check "GET unknown id" '[ "$(code "$B/v1/responses/resp_nope")" = 404 ]'
check "GET bad sub-path" '[ "$(code "$B/v1/responses/resp_nope/other")" = 404 ]'
check "GET id with odd bytes" '[ "$(code "$B/v1/responses/..%2F..%2Fetc")" = 404 ]'
check "DELETE unknown" '[ "$(code -X DELETE "$B/v1/responses/resp_nope")" = 404 ]'
check "POST on an id is 405, Allow: GET, DELETE" '[ "$(code -X POST "$B/v1/responses/resp_nope" -d "{}")" = 405 ] && curl -s -i -X POST "${A[@]}" "$B/v1/responses/resp_nope" -d "{}" | grep -qi "^Allow: GET, DELETE, OPTIONS"'
check "GET /v1/responses is 405" '[ "$(code "$B/v1/responses")" = 405 ]'

# ---- store, retrieve, input items, delete -------------------------------------
r=$(post "{\"input\":\"Hello!\",$R}")
id=$(echo "$r" | jq_ 'd["id"]')
same_json() { python3 -c 'import json,sys; sys.exit(json.loads(sys.argv[1]) != json.loads(sys.argv[2]))' "$1" "$2"; }
check "retrieve equals create" 'same_json "$(get "/v1/responses/$id")" "$r"'
check "input items" '[ "$(get "/v1/responses/$id/input_items" | jq_ "d[\"object\"], len(d[\"data\"]), d[\"data\"][0][\"content\"][0][\"text\"], d[\"has_more\"]")" = "list 1 Hello! False" ]'
check "input items: bad order" '[ "$(code "$B/v1/responses/$id/input_items?order=up")" = 400 ]'
check "input items: bad limit" '[ "$(code "$B/v1/responses/$id/input_items?limit=0")" = 400 ]'
r2=$(post "{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"}],$R}")
id2=$(echo "$r2" | jq_ 'd["id"]')
page=$(get "/v1/responses/$id2/input_items?limit=2")
check "input items paged, newest first" '[ "$(echo "$page" | jq_ "[i[\"content\"][0][\"text\"] for i in d[\"data\"]], d[\"has_more\"]")" = "['"'"'c'"'"', '"'"'b'"'"'] True" ]'
last=$(echo "$page" | jq_ 'd["last_id"]')
check "input items after a cursor" '[ "$(get "/v1/responses/$id2/input_items?limit=2&after=$last" | jq_ "[i[\"content\"][0][\"text\"] for i in d[\"data\"]], d[\"has_more\"]")" = "['"'"'a'"'"'] False" ]'
check "delete" '[ "$(curl -s -X DELETE "${A[@]}" "$B/v1/responses/$id2" | jq_ "d[\"id\"]==\"$id2\" and d[\"deleted\"]")" = True ] && [ "$(code "$B/v1/responses/$id2")" = 404 ]'
r=$(post "{\"input\":\"Hello!\",\"store\":false,$R}")
check "store=false is not kept" '[ "$(code "$B/v1/responses/$(echo "$r" | jq_ "d[\"id\"]")")" = 404 ]'

# ---- streaming: named events, sequence numbers, stored at the end --------------
curl -s -N "${A[@]}" "$B/v1/responses" -d "{\"input\":\"Hello!\",\"stream\":true,$R}" >"$WORK/sse"
check "event grammar" 'python3 - "$WORK/sse" <<'"'"'PY'"'"'
import json,sys
evs=[]
name=None
for l in open(sys.argv[1]):
    l=l.rstrip("\n")
    if l.startswith("event: "): name=l[7:]
    elif l.startswith("data: "):
        d=json.loads(l[6:]); assert d["type"]==name, (d["type"],name); evs.append(d)
types=[e["type"] for e in evs]
assert [e["sequence_number"] for e in evs]==list(range(len(evs)))
assert types[:4]==["response.created","response.in_progress","response.output_item.added","response.content_part.added"], types[:4]
assert types[-4:]==["response.output_text.done","response.content_part.done","response.output_item.done","response.incomplete"], types[-4:]
text="".join(e["delta"] for e in evs if e["type"]=="response.output_text.delta")
assert text==evs[-4]["text"]==evs[-1]["response"]["output"][0]["content"][0]["text"]
assert evs[-1]["response"]["incomplete_details"]=={"reason":"max_output_tokens"}
open(sys.argv[1]+".id","w").write(evs[-1]["response"]["id"])
PY'
check "streamed response stored" '[ "$(get "/v1/responses/$(cat "$WORK/sse.id")" | jq_ "d[\"status\"]")" = incomplete ]'

# ---- byte cap: least recently used first ----------------------------------------
ids=()
for i in 1 2 3 4 5 6; do ids+=("$(post "{\"input\":\"Hello!\",$R}" | jq_ 'd["id"]')"); done
stats=$(get /stats)
check "cap holds (stats)" '[ "$(echo "$stats" | jq_ "d[\"response_store\"][\"bytes\"] <= 6000 and d[\"response_store\"][\"evicted\"] >= 1")" = True ]'
check "oldest evicted, newest kept" '[ "$(code "$B/v1/responses/${ids[0]}")" = 404 ] && [ "$(code "$B/v1/responses/${ids[5]}")" = 200 ]'
stop_server

start_server --response-store-ttl 8
# ---- TTL (8 s: loaded sanitizer hosts took more than 1 s, once more than 3 s,
# between the POST's reply and the GET) ---------------------------------------------
r=$(post "{\"input\":\"Hello!\",$R}"); tid=$(echo "$r" | jq_ 'd["id"]')
check "fresh response found" '[ "$(code "$B/v1/responses/$tid")" = 200 ]'
sleep 8.5
check "expired after the TTL" '[ "$(code "$B/v1/responses/$tid")" = 404 ] && err "{\"input\":\"hi\",\"previous_response_id\":\"$tid\"}" 404 previous_response_id'

stop_server

# ---- concurrency and persistence across a restart ---------------------------------
start_server --response-store-dir "$WORK/store" --max-concurrency 4
for i in $(seq 8); do post "{\"input\":\"Hello!\",$R}" | jq_ 'd["id"]' >"$WORK/c.$i" & done
wait_clients() { for p in $(jobs -p); do [ "$p" != "$SRV" ] && wait "$p"; done; }
wait_clients
n=0; for i in $(seq 8); do [ "$(code "$B/v1/responses/$(cat "$WORK/c.$i")")" = 200 ] && n=$((n + 1)); done
check "8 concurrent creates all stored ($n)" '[ $n = 8 ]'
r=$(post "{\"input\":\"What is 2 + 3?\",$R}"); pid=$(echo "$r" | jq_ 'd["id"]')
before=$(get "/v1/responses/$pid")
check "one file per response" '[ -f "$WORK/store/$pid.json" ] && [ "$(ls "$WORK/store" | grep -c "\.json$")" = 9 ] && ! ls "$WORK/store" | grep -q tmp'
curl -s -X DELETE "${A[@]}" "$B/v1/responses/$(cat "$WORK/c.1")" >/dev/null
check "delete removes the file" '[ ! -f "$WORK/store/$(cat "$WORK/c.1").json" ]'
stop_server; rc=$?
check "clean shutdown (rc $rc)" '[ $rc = 0 ]'
start_server --response-store-dir "$WORK/store"
check "reloaded after restart" '[ "$(get "/v1/responses/$pid")" = "$before" ] && [ "$(get /stats | jq_ "d[\"response_store\"][\"loaded\"]")" = 8 ]'
check "deleted stays deleted" '[ "$(code "$B/v1/responses/$(cat "$WORK/c.1")")" = 404 ]'
r=$(post "{\"input\":\"Hello!\",\"previous_response_id\":\"$pid\",$R}")
check "continues a reloaded response" '[ "$(echo "$r" | jq_ "d[\"previous_response_id\"]")" = "$pid" ] && [ "$(get "/v1/responses/$(echo "$r" | jq_ "d[\"id\"]")/input_items?order=asc" | jq_ "len(d[\"data\"])")" = 3 ]'
stop_server
[ $fails = 0 ] || { tail -20 "$WORK/log"; exit 1; }
echo "all responses checks passed"
