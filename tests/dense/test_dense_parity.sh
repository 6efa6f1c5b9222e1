#!/usr/bin/env bash
# Parity of the Llama family (llama, mistral, qwen2, qwen3) against
# transformers: full-sequence logits and greedy continuations on every
# golden checkpoint (tests/support/golden_parity.sh).
set -uo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
. "$EMBER_SRC/tests/support/golden_parity.sh"
golden_parity "$EMBER_SRC/tests/golden/dense" 1e-5
