#!/usr/bin/env bash
# Parity of the Qwen3.5 family against transformers: for every golden
# checkpoint (text and VL layouts, sequences crossing the 64-token chunk of
# the delta rule) full-sequence logits and the greedy continuation, which
# decodes token by token and so checks the recurrent form after a chunked
# prefill (tests/support/golden_parity.sh).
set -uo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
. "$EMBER_SRC/tests/support/golden_parity.sh"
golden_parity "$EMBER_SRC/tests/golden/qwen3_5" 1e-5
