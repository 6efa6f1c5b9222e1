#!/usr/bin/env bash
# End-to-end with the official `openai` npm package: a real `ember serve`
# of the demo model on a free loopback port, driven by the node test files
# in tests/node (node's built-in test runner). The packages come from
# tests/node/setup.sh (a cache dir; skips with 77 when npm is unreachable
# and nothing is cached). Also serves with a response store directory so the
# Responses tests exercise persistence.
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
command -v node >/dev/null || { echo "SKIP: node not installed"; exit 77; }
NODE_DIR=$(bash "$EMBER_SRC/tests/node/setup.sh") || exit $?
MODEL="$EMBER_SRC/models/demo"
[ -f "$MODEL/config.json" ] || { echo "SKIP: no demo model"; exit 77; }
WORK=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# The test files import "openai": give them a node_modules beside them.
ln -s "$NODE_DIR/node_modules" "$WORK/node_modules"
tests=()
for t in "$EMBER_SRC"/tests/node/*.test.mjs; do cp "$t" "$WORK/"; tests+=("$WORK/$(basename "$t")"); done

# MODEL omitted: the demo model (found through EMBER_DEMO_MODEL here).
EMBER_DEMO_MODEL="$MODEL" "$EMBER_BIN" serve --port 0 --api-key sdk-k3y --max-concurrency 2 >"$WORK/log" 2>&1 &
SRV=$!
for _ in $(seq 150); do grep -q "listening on" "$WORK/log" && break; sleep 0.1; done
B=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/log" | head -1)
[ -n "$B" ] || { cat "$WORK/log"; exit 1; }
for _ in $(seq 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")" = 200 ] && break; sleep 0.1; done

EMBER_BASE_URL="$B/v1" EMBER_API_KEY=sdk-k3y node --test --test-concurrency=1 "${tests[@]}"
rc=$?
[ $rc = 0 ] || tail -20 "$WORK/log"
exit $rc
