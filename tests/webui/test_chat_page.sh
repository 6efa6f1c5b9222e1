#!/usr/bin/env bash
# The chat page in a real browser against `ember serve` with the demo model:
# loads, streams a reply that grows in place, stops a reply mid-stream,
# renders markdown without interpreting HTML, shows a tool call card and the
# answer to its result, shows reasoning, asks for the API key on 401; saves a
# screenshot to $EMBER_BUILD/test-artifacts/chat_page.png.
# Needs Debian's chromium (scripts/install-deps.sh) and playwright-core from
# npm (installed here into a cache dir). Skips (77) when `ember serve` does
# not exist or no browser can be had.
set -uo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}" "${EMBER_BUILD:?}"

skip() { echo "SKIP: $*"; exit 77; }

"$EMBER_BIN" serve --help >/dev/null 2>&1 || skip "this ember has no 'serve' verb"
model="$EMBER_SRC/models/demo"
[ -f "$model/config.json" ] || skip "no demo model at $model"

if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium (Debian package)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || true
fi
[ -x /usr/bin/chromium ] || skip "no /usr/bin/chromium and it cannot be installed here"
command -v node >/dev/null && command -v npm >/dev/null || skip "node/npm not installed"

# playwright-core only drives the browser; it downloads none of its own.
PW_VERSION=1.65.1
cache="${EMBER_TEST_CACHE:-$HOME/.cache/ember-test}/playwright"
export PW_CORE="$cache/node_modules/playwright-core"
if [ "$(node -p "try { require('$PW_CORE/package.json').version } catch (e) { '' }" 2>/dev/null)" != "$PW_VERSION" ]; then
  mkdir -p "$cache"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$cache" --no-save --no-audit --no-fund --silent \
    "playwright-core@$PW_VERSION" >/dev/null 2>&1 || skip "cannot install playwright-core from npm"
fi

tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# start_server [extra serve args...]: starts ember serve, waits for /health.
start_server() {
  port=$(free_port)
  "$EMBER_BIN" serve "$model" --host 127.0.0.1 --port "$port" "$@" >"$tmp/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 150); do
    if curl -s -o /dev/null "http://127.0.0.1:$port/health"; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "FAIL: ember serve did not come up"; cat "$tmp/server.log"; exit 1
}
stop_server() { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; server_pid=""; }

artifacts="$EMBER_BUILD/test-artifacts"
mkdir -p "$artifacts"
export ARTIFACTS="$artifacts"
run_driver() {
  rm -rf "$tmp/profile"; mkdir -p "$tmp/profile"
  BROWSER_DATA="$tmp/profile" BASE_URL="http://127.0.0.1:$port" \
    timeout "$([ -n "${EMBER_SANITIZED:-}" ] && echo 800 || echo 180)" node "$EMBER_SRC/tests/webui/chat_page_driver.cjs"
}

start_server
if ! run_driver; then echo "--- server log"; tail -n 40 "$tmp/server.log"; exit 1; fi
stop_server

# With an API key: the page asks for it on 401 and then works as before.
if "$EMBER_BIN" serve --help 2>&1 | grep -q -- "--api-key"; then
  start_server --api-key "page-test-key"
  if ! API_KEY="page-test-key" run_driver; then echo "--- server log"; tail -n 40 "$tmp/server.log"; exit 1; fi
  stop_server
else
  echo "note: ember serve has no --api-key option; the API key path is not exercised"
fi
echo "chat page: all checks passed"
