#!/usr/bin/env bash
# Structured outputs through the server (demo model, sampling at
# temperature 1 so nothing but the grammar makes the output valid):
# response_format json_schema replies parse and satisfy the schema,
# json_object replies are JSON objects, tool_choice required / named always
# yield a valid call of the right tool, unsupported schemas are 400s.
. "$EMBER_SRC/tests/support/serve_demo.sh"
serve_demo
post() { curl -s "$B/v1/chat/completions" -H 'Content-Type: application/json' -d "$1"; }

SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},"required":["name","age","tags"],"additionalProperties":false}'
ok=0
for seed in 1 2 3 4 5 6; do
  r=$(post "{\"messages\":[{\"role\":\"user\",\"content\":\"Describe a person.\"}],\"temperature\":1,\"seed\":$seed,\"max_tokens\":120,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":$SCHEMA}}}")
  if echo "$r" | python3 -c '
import json,sys
d=json.load(sys.stdin); c=d["choices"][0]
assert c["finish_reason"]=="stop", c["finish_reason"]
o=json.loads(c["message"]["content"])
assert set(o)=={"name","age","tags"}, o
assert isinstance(o["name"],str) and len(o["name"])<=20
assert isinstance(o["age"],int) and not isinstance(o["age"],bool) and 0<=o["age"]<=150
assert isinstance(o["tags"],list) and len(o["tags"])<=3 and all(t in "abc" for t in o["tags"])
'; then ok=$((ok + 1)); else echo "invalid: $r"; fi
done
check "json_schema replies satisfy the schema ($ok/6)" '[ $ok = 6 ]'

# json_object bounds nothing but the syntax: at temperature 1 a reply may
# run to max_tokens inside a long string, so each seed's reply must either
# end (stop) as a JSON object or be cut by the length limit, and at least
# one must end.
stops=0 bad=0
for seed in 9 10 11 12; do
  r=$(post "{\"messages\":[{\"role\":\"user\",\"content\":\"Anything.\"}],\"temperature\":1,\"seed\":$seed,\"max_tokens\":200,\"response_format\":{\"type\":\"json_object\"}}")
  case $(echo "$r" | python3 -c '
import json,sys
c=json.load(sys.stdin)["choices"][0]
if c["finish_reason"]=="length": print("length")
elif c["finish_reason"]=="stop" and isinstance(json.loads(c["message"]["content"]), dict): print("stop")
else: print("bad")' 2>/dev/null || echo bad) in
    stop) stops=$((stops + 1)) ;;
    length) ;;
    *) bad=$((bad + 1)); echo "invalid: $r" ;;
  esac
done
check "json_object replies are objects ($stops of 4 ended, $bad invalid)" '[ $bad = 0 ] && [ $stops -ge 1 ]'

TOOLS='[{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}},{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":30}},"required":["city"]}}}]'
ok=0
for seed in 1 2 3 4; do
  r=$(post "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"temperature\":1,\"seed\":$seed,\"max_tokens\":120,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}")
  echo "$r" | python3 -c '
import json,sys
c=json.load(sys.stdin)["choices"][0]
assert c["finish_reason"]=="tool_calls"
tc=c["message"]["tool_calls"]; assert len(tc)>=1
f=tc[0]["function"]; assert f["name"]=="get_weather"
a=json.loads(f["arguments"]); assert set(a)=={"city"} and isinstance(a["city"],str)
' && ok=$((ok + 1)) || echo "bad call: $r"
done
check "named tool_choice always calls that tool ($ok/4)" '[ $ok = 4 ]'
r=$(post "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":1,\"seed\":3,\"max_tokens\":120,\"tools\":$TOOLS,\"tool_choice\":\"required\"}")
check "required tool_choice yields a call" 'echo "$r" | python3 -c "import json,sys; c=json.load(sys.stdin)[\"choices\"][0]; assert c[\"finish_reason\"]==\"tool_calls\" and c[\"message\"][\"tool_calls\"][0][\"function\"][\"name\"] in (\"add\",\"get_weather\")"'

code=$(curl -s -o "$WORK/e" -w '%{http_code}' "$B/v1/chat/completions" -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","not":{"type":"string"}}}}}')
check "unsupported keyword is a 400 naming it" '[ "$code" = 400 ] && grep -q "not" "$WORK/e"'
code=$(curl -s -o "$WORK/e" -w '%{http_code}' "$B/v1/chat/completions" -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}")
check "unknown named tool is a 400" '[ "$code" = 400 ]'
echo "$fails failed"
[ $fails = 0 ]
