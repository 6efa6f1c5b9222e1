#!/usr/bin/env bash
# `ember chat` fed from stdin (not a terminal: no prompts, no colour) with
# the demo model and greedy decoding: a plain turn, multi-line input ("\"
# continuation and """ blocks), /system, /reset, reasoning framed by
# <think>, a tool call printed and answered with /tool, the statistics line,
# Ctrl-C stopping a long reply while the chat goes on, /exit; and the usage
# errors.
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
MODEL="$EMBER_SRC/models/demo"
[ -f "$MODEL/config.json" ] || { echo "SKIP: no demo model"; exit 77; }
WORK=$(mktemp -d)
CHAT=""
cleanup() { [ -n "$CHAT" ] && kill "$CHAT" 2>/dev/null; exec 3>&- 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fails=0
check() { if eval "$2"; then :; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
chat() { "$EMBER_BIN" chat "$MODEL" --temperature 0 "$@"; }

# One turn.
printf 'Hello!\n' | chat >"$WORK/a.out" 2>"$WORK/a.err"; rc=$?
check "plain turn exits 0 at EOF" '[ $rc = 0 ]'
check "reply text" 'grep -q "Hello" "$WORK/a.out"'
check "no prompt or colour off a terminal" '! grep -q ">>>\|$(printf "\033")" "$WORK/a.out"'
check "tokens/s line" 'grep -Eq "^\[[0-9]+ tokens, [0-9.]+ tokens/s" "$WORK/a.err"'

# MODEL omitted: the demo model.
printf 'Hello!\n/exit\nnever sent\n' | EMBER_DEMO_MODEL="$MODEL" "$EMBER_BIN" chat --temperature 0 >"$WORK/d.out" 2>"$WORK/d.err"
check "demo model by default, same reply" 'cmp -s "$WORK/a.out" "$WORK/d.out"'
check "/exit ends the chat" '[ "$(grep -c "tokens/s" "$WORK/d.err")" = 1 ]'

# Multi-line input: both forms reach the model as one message (one reply each).
printf 'Write a Python function \\\nthat adds two numbers.\n"""\nHello\nthere!\n"""\n' | chat >"$WORK/m.out" 2>"$WORK/m.err"
check "two multi-line messages, two replies" '[ "$(grep -c "tokens/s" "$WORK/m.err")" = 2 ]'
check "continuation joined" 'grep -q "def add" "$WORK/m.out"'

# /system and /reset are acknowledged; /reset forgets the conversation, so
# the same question after it gets the same first answer again.
printf 'Hello!\n/reset\nHello!\n/system You are a pirate.\n/bogus\n' | chat >"$WORK/r.out" 2>"$WORK/r.err"
check "/reset acknowledged" 'grep -q "(new conversation)" "$WORK/r.err"'
check "/system acknowledged" 'grep -q "(system prompt set)" "$WORK/r.err"'
check "unknown command named" 'grep -q "unknown command /bogus" "$WORK/r.err"'
check "after /reset the reply repeats" '[ "$(sed -n 1p "$WORK/r.out")" = "$(sed -n 2p "$WORK/r.out")" ]'

# Reasoning framed off a terminal.
printf 'What is 7 times 6?\n' | chat --think >"$WORK/t.out" 2>/dev/null
check "reasoning framed" '[ "$(head -1 "$WORK/t.out")" = "<think>" ] && grep -q "^</think>$" "$WORK/t.out"'

# Tool call printed, answered with /tool, answer uses the result.
cat >"$WORK/tools.json" <<'J'
[{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]
J
printf "What's the weather in Paris?\n/tool {\"city\": \"Paris\", \"temperature\": 18, \"unit\": \"celsius\", \"condition\": \"sunny\"}\n" |
  chat --tools "$WORK/tools.json" >"$WORK/tc.out" 2>"$WORK/tc.err"
check "tool call printed" 'grep -qx "\[tool call\] get_weather({\"city\":\"Paris\"})" "$WORK/tc.out"'
check "tool result answered" 'tail -1 "$WORK/tc.out" | grep -q "18"'
printf '/tool 42\n' | chat >/dev/null 2>"$WORK/nt.err"
check "/tool without a call" 'grep -q "no tool call to answer" "$WORK/nt.err"'

# Ctrl-C stops a long reply; the chat keeps going and answers the next line.
mkfifo "$WORK/in"
"$EMBER_BIN" chat "$MODEL" --temperature 0 --max-tokens 1500 <"$WORK/in" >"$WORK/c.out" 2>"$WORK/c.err" &
CHAT=$!
exec 3>"$WORK/in"
echo "Recite Genesis 1." >&3
# (generous waits: a loaded machine, or a sanitizer build, starts slowly)
for _ in $(seq 1200); do [ "$(wc -c <"$WORK/c.out")" -gt 40 ] && break; sleep 0.05; done
kill -INT "$CHAT"
for _ in $(seq 600); do grep -q "stopped" "$WORK/c.err" && break; sleep 0.05; done
check "Ctrl-C stops the reply" 'grep -q ", stopped\]" "$WORK/c.err"'
echo "Hello!" >&3
echo "/exit" >&3
for _ in $(seq 1200); do kill -0 "$CHAT" 2>/dev/null || break; sleep 0.05; done
kill -KILL "$CHAT" 2>/dev/null # still running: a failure below, never a hang
wait "$CHAT"; rc=$?; CHAT=""
check "chat goes on after Ctrl-C and exits 0 (rc $rc)" '[ $rc = 0 ] && [ "$(grep -c "tokens/s" "$WORK/c.err")" = 2 ]'
exec 3>&-

# Ctrl-C twice at the prompt exits.
"$EMBER_BIN" chat "$MODEL" --temperature 0 <"$WORK/in" >/dev/null 2>"$WORK/q.err" &
CHAT=$!
exec 3>"$WORK/in"
echo "Hello!" >&3 # answered: the chat is then waiting at its prompt
for _ in $(seq 1200); do grep -q "tokens/s" "$WORK/q.err" && break; sleep 0.05; done
kill -INT "$CHAT"; sleep 0.2; kill -INT "$CHAT"
for _ in $(seq 200); do kill -0 "$CHAT" 2>/dev/null || break; sleep 0.05; done
check "two Ctrl-C at the prompt exit" '! kill -0 "$CHAT" 2>/dev/null && grep -q "Ctrl-C again" "$WORK/q.err"'
kill -KILL "$CHAT" 2>/dev/null
wait "$CHAT" 2>/dev/null; CHAT=""
exec 3>&-

"$EMBER_BIN" chat --help | grep -q "usage: ember chat"
check "--help" '[ $? = 0 ]'
"$EMBER_BIN" chat "$MODEL" --bogus </dev/null >/dev/null 2>&1
check "unknown option is a usage error" '[ $? = 2 ]'
"$EMBER_BIN" chat "$MODEL" --tools /nonexistent </dev/null >/dev/null 2>&1
check "missing tools file is a usage error" '[ $? = 2 ]'
[ $fails = 0 ] || exit 1
echo "all chat checks passed"
