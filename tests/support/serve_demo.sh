#!/usr/bin/env bash
# Shared set-up of the server tests that run the demo model: sourced, it
# sets WORK (a temp dir removed at exit), fails/check, and
# `serve_demo [serve options]`, which starts `ember serve --port 0` with the
# options, waits until /health is 200, and sets B to the base URL and SRV to
# the server's pid (killed at exit).
set -u
command -v curl >/dev/null && command -v python3 >/dev/null || exit 77
WORK=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

serve_demo() {
  "$EMBER_BIN" serve --port 0 "$@" >"$WORK/log" 2>&1 &
  SRV=$!
  for _ in $(seq 150); do grep -q "listening on" "$WORK/log" && break; sleep 0.1; done
  B=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/log" | head -1)
  [ -n "$B" ] || { cat "$WORK/log"; exit 1; }
  for _ in $(seq 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")" = 200 ] && break; sleep 0.1; done
}
