#!/usr/bin/env bash
# The Anthropic Messages API driven by the official @anthropic-ai/sdk client
# (tests/node/anthropic/sdk_test.mjs) against a real `ember serve` on the
# scripted checkpoint: create, stream + finalMessage, tool round trip,
# countTokens, stop sequences, typed errors. Skips (77) when node or the
# npm packages are unavailable.
set -u
command -v node >/dev/null && command -v curl >/dev/null && command -v python3 >/dev/null || exit 77
MODS=$(bash "$EMBER_SRC/tests/node/anthropic/setup.sh") || exit 77
WORK=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
. "$EMBER_SRC/tests/support/scripted_server.sh"
scripted_server_start "$WORK" '<think>Let me ping.</think><tool_call>{"arguments":{},"name":"ping"}</tool_call><|im_end|>' \
    --api-key k3y
# Node resolves packages from the script's directory upwards: run a copy
# placed next to the installed node_modules.
cp "$EMBER_SRC/tests/node/anthropic/sdk_test.mjs" "$MODS/sdk_test.mjs"
node "$MODS/sdk_test.mjs" "$B" k3y
rc=$?
[ $rc = 0 ] || tail -20 "$WORK/log"
exit $rc
