#!/usr/bin/env bash
# Per-request configuration (the X-Ember-Config header) on a real server:
# the demo model with a chat template that writes the day of the month as
# that many " x" tokens, so EMBER_TEMPLATE_NOW shows in the prompt's token
# count, and EMBER_PRECISION shows in the prompt tokens the engine
# prefilled with FAST arithmetic (/stats) and, on a CPU with bf16
# dot-product kernels, in the logprobs of the first token.
# Requests with different overrides run at once, on every generating
# endpoint, and each must get exactly what it gets alone; the process
# snapshot (/stats "config") must not move. Bad headers are 400 in each
# protocol's error shape, naming the variable. With the prefix cache on, an
# EXACT request never reuses blocks a FAST one computed.
. "$EMBER_SRC/tests/support/serve_demo.sh"
DEMO="$EMBER_SRC/models/demo"
mkdir -p "$WORK/model"
for f in config.json generation_config.json model.safetensors tokenizer.json; do ln -s "$DEMO/$f" "$WORK/model/$f"; done
python3 - "$DEMO/tokenizer_config.json" "$WORK/model/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
day = "{{- 'Day' }}{%- for i in range(strftime_now('%d') | int) %}{{ ' x' }}{%- endfor %}\n"
c["chat_template"] = day + c["chat_template"]
json.dump(c, open(sys.argv[2], "w"))
PY
export TZ=UTC
# One step prefills every waiting prompt whole, so no prompt is split into
# spans too short for FAST arithmetic.
# Sanitized builds run several times slower: one lighter round, and time to wait.
SLOW=0; IDLE=30; [ -n "${EMBER_SANITIZED:-}" ] && SLOW=1 IDLE=600
serve_demo "$WORK/model" --max-batch 8 --max-concurrency 8 --no-prefix-cache --prefill-chunk 4096 --timeout "$IDLE"

python3 - "$B" "$SLOW" <<'PY' || fails=$((fails + 1))
import json, sys, threading, urllib.request, urllib.error

B, SLOW = sys.argv[1], sys.argv[2] == "1"
WAIT = 900 if SLOW else 120
MSG = [{"role": "user", "content": "Tell me something about the sea and the sky."}]
# 2023-11-03, 2023-11-17, 2023-11-28 (UTC): days 3, 17 and 28
D3, D17, D28 = 1699000000, 1700200000, 1701150000

def post(path, body, header=None):
    h = {"Content-Type": "application/json"}
    if header is not None:
        h["X-Ember-Config"] = header
    req = urllib.request.Request(B + path, data=json.dumps(body).encode(), headers=h)
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)

def get(path):
    with urllib.request.urlopen(B + path, timeout=WAIT) as r:
        return json.load(r)

# What each request observes: (prompt tokens, first-token logprob) or prompt tokens alone.
def chat(header):
    s, d = post("/v1/chat/completions", {"messages": MSG, "temperature": 0, "max_tokens": 3, "logprobs": True,
                                          "top_logprobs": 2,
                                          "chat_template_kwargs": {"enable_thinking": False}}, header)
    assert s == 200, d
    lp = d["choices"][0]["logprobs"]["content"][0]
    return d["usage"]["prompt_tokens"], lp["logprob"], [t["logprob"] for t in lp["top_logprobs"]]

def completion(header):
    s, d = post("/v1/completions", {"prompt": "The sea and the sky are both blue, and the wind over the water is cold "
                                              "in the morning.", "temperature": 0, "max_tokens": 2, "logprobs": 2, "ignore_eos": True}, header)
    assert s == 200, d
    return d["usage"]["prompt_tokens"], d["choices"][0]["logprobs"]["token_logprobs"][0]

def responses(header):
    s, d = post("/v1/responses", {"input": MSG[0]["content"], "max_output_tokens": 2, "temperature": 0}, header)
    assert s == 200, d
    return d["usage"]["input_tokens"]

def messages(header):
    s, d = post("/v1/messages", {"model": "model", "messages": MSG, "max_tokens": 2, "temperature": 0}, header)
    assert s == 200, d
    return d["usage"]["input_tokens"]

def fast_tokens():
    return get("/stats")["engine"]["batching"]["prefill_fast_tokens"]

def prompt_tokens(r):
    return r if isinstance(r, int) else r[0]

cases = [
    (chat, f"EMBER_PRECISION=exact, EMBER_TEMPLATE_NOW={D3}"),
    (chat, f"EMBER_PRECISION=fast,EMBER_TEMPLATE_NOW={D17}"),
    (chat, f"EMBER_TEMPLATE_NOW={D28}, EMBER_PRECISION=exact"),
    (chat, f"EMBER_TEMPLATE_NOW={D3}, EMBER_PRECISION=fast"),
    (completion, "EMBER_PRECISION=exact"),
    (completion, "EMBER_PRECISION=fast"),
    (responses, f"EMBER_TEMPLATE_NOW={D3}"),
    (responses, f"EMBER_TEMPLATE_NOW={D28}"),
    (messages, f"EMBER_TEMPLATE_NOW={D17}"),
    (messages, f"EMBER_TEMPLATE_NOW={D28}"),
]
# The server prefills FAST unless a request says exact.
is_fast = ["EMBER_PRECISION=exact" not in h for _, h in cases]
fails = 0
def expect(what, cond):
    global fails
    print(("ok   " if cond else "FAIL: ") + what)
    fails += 0 if cond else 1

config_before = get("/stats")["config"]
alone, fast_alone = [], []
for (fn, h) in cases:
    f0 = fast_tokens()
    alone.append(fn(h))
    fast_alone.append(fast_tokens() - f0)
    print(f"alone: {fn.__name__:10} [{h}] -> {alone[-1]}, FAST prompt tokens {fast_alone[-1]}")
expect("each request alone prefills with its own precision",
       all(fa == (prompt_tokens(r) if f else 0) for fa, r, f in zip(fast_alone, alone, is_fast)))

# The overrides are observable: the day's " x" tokens, and FAST vs EXACT logprobs.
expect("the date shows in the chat prompt", alone[1][0] - alone[0][0] == 14 and alone[2][0] - alone[0][0] == 25
       and alone[3][0] == alone[0][0])
# FAST and EXACT differ only where the backend has bf16 dot products.
if alone[0][1] == alone[3][1] and alone[4][1] == alone[5][1]:
    print("note: this CPU computes FAST like EXACT (no bf16 dot-product kernels); logprobs cannot tell them apart")
else:
    expect("precision shows in the chat logprobs", alone[0][1] != alone[3][1])
    expect("precision shows in the completion logprobs", alone[4][1] != alone[5][1])
expect("the date shows in the Responses prompt", alone[7] - alone[6] == 25)
expect("the date shows in the Messages prompt", alone[9] - alone[8] == 11)
# No header: the process snapshot (the clock; the server's FAST prefill).
s, d = post("/v1/completions", {"prompt": "The sea and the sky are both blue, and the wind over the water is cold "
                                          "in the morning.", "temperature": 0, "max_tokens": 2, "logprobs": 2, "ignore_eos": True})
expect("no header keeps the server's precision", d["choices"][0]["logprobs"]["token_logprobs"][0] == alone[5][1])

# All at once, three rounds, shuffled: each request gets exactly its own.
import random
rng = random.Random(5)
for rnd in range(1 if SLOW else 3):
    order = list(range(len(cases))) * (1 if SLOW else 2)
    rng.shuffle(order)
    got = [None] * len(order)
    f0 = fast_tokens()
    def run(k):
        fn, h = cases[order[k]]
        try:
            got[k] = fn(h)
        except Exception as e:
            got[k] = repr(e)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(len(order))]
    for t in ts: t.start()
    for t in ts: t.join()
    bad = [(cases[order[k]][1], got[k], alone[order[k]]) for k in range(len(order)) if got[k] != alone[order[k]]]
    for b in bad:
        print("  differs:", b)
    expect(f"round {rnd}: {len(order)} concurrent requests each got their own overrides", not bad)
    want = sum(prompt_tokens(alone[i]) for i in order if is_fast[i])
    got_fast = fast_tokens() - f0
    expect(f"round {rnd}: FAST prompt tokens {got_fast}, the FAST requests' prompts {want}", got_fast == want)

config_after = get("/stats")["config"]
expect("the process snapshot is unchanged", config_before == config_after)
expect("no request source in the process snapshot", all(v["source"] != "request" for v in config_after.values()))

# Bad headers: 400 in each protocol's shape, naming the variable.
s, d = post("/v1/chat/completions", {"messages": MSG, "max_tokens": 1}, "EMBER_PRECISION=turbo")
expect("bad value: OpenAI 400 naming the variable",
       s == 400 and d["error"]["param"] == "X-Ember-Config" and d["error"]["code"] == "invalid_config"
       and "EMBER_PRECISION=turbo" in d["error"]["message"])
s, d = post("/v1/completions", {"prompt": "hi", "max_tokens": 1}, "EMBER_THREADS=2")
expect("process-wide variable: 400 saying so",
       s == 400 and "EMBER_THREADS cannot be overridden per request" in d["error"]["message"])
s, d = post("/v1/responses", {"input": "hi", "max_output_tokens": 1}, "EMBER_PRECISON=exact")
expect("misspelt name: 400 with the suggestion", s == 400 and "did you mean EMBER_PRECISION" in d["error"]["message"])
s, d = post("/v1/messages", {"model": "model", "messages": MSG, "max_tokens": 1}, "EMBER_TEMPLATE_NOW=soon")
expect("bad value: Anthropic 400 naming the variable",
       s == 400 and d["type"] == "error" and d["error"]["type"] == "invalid_request_error"
       and "EMBER_TEMPLATE_NOW=soon" in d["error"]["message"])
s, d = post("/v1/messages/count_tokens", {"model": "model", "messages": MSG}, "EMBER_HOST=0.0.0.0")
expect("count_tokens: 400 for a process-wide variable",
       s == 400 and "EMBER_HOST cannot be overridden" in d["error"]["message"])
s, d = post("/v1/messages/count_tokens", {"model": "model", "messages": MSG}, f"EMBER_TEMPLATE_NOW={D28}")
expect("count_tokens sees the date", s == 200 and d["input_tokens"] == alone[9])
s, d = post("/v1/chat/completions", {"messages": MSG, "max_tokens": 1}, "EMBER_PRECISION")
expect("an item without '=': 400", s == 400 and "not NAME=value" in d["error"]["message"])
sys.exit(1 if fails else 0)
PY

# Repeated headers join as one list (HTTP's rule): a name in both is given twice.
r=$(curl -s -H 'Content-Type: application/json' -H 'X-Ember-Config: EMBER_PRECISION=exact' \
    -H 'X-Ember-Config: EMBER_PRECISION=fast' "$B/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}')
check "repeated headers are one list" 'echo "$r" | grep -q "EMBER_PRECISION is overridden twice"'
kill "$SRV"; wait "$SRV" 2>/dev/null; SRV=""

# Prefix cache: blocks are keyed by the prefill arithmetic.
serve_demo "$WORK/model" --max-batch 4
LONG=$(python3 -c 'print(" ".join(["The quick brown fox jumps over the lazy dog."] * 20))')
req=$(python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"user","content":sys.argv[1]}],"temperature":0,"max_tokens":2}))' "$LONG")
cached() { curl -s "$B/v1/chat/completions" -H 'Content-Type: application/json' -H "X-Ember-Config: $1" -d "$req" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])'; }
f1=$(cached EMBER_PRECISION=fast); f2=$(cached EMBER_PRECISION=fast); e1=$(cached EMBER_PRECISION=exact); e2=$(cached EMBER_PRECISION=exact)
echo "cached tokens: fast $f1 then $f2, exact $e1 then $e2"
check "a FAST prompt is reused by FAST" '[ "$f1" = 0 ] && [ "$f2" -gt 0 ]'
check "EXACT does not reuse FAST blocks, then reuses its own" '[ "$e1" = 0 ] && [ "$e2" -gt 0 ]'
[ "$fails" = 0 ]
