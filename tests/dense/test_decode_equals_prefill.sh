#!/usr/bin/env bash
# Decoding token by token must give the logits of the full-sequence forward:
# `logits` of ids[0..k] (one prefill) vs the last row of successive prefixes.
# Uses the C test driver test_decode_steps for the step-by-step side.
set -euo pipefail
: "${EMBER_BUILD:?}" "${EMBER_SRC:?}"
exec "$EMBER_BUILD/tests/test_decode_steps" "$EMBER_SRC"/tests/golden/dense/*/
