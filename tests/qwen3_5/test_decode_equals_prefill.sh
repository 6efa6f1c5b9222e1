#!/usr/bin/env bash
# Qwen3.5: decoding token by token (recurrent delta rule) gives the logits of
# the full-sequence forward (chunked), and uneven prefill chunks carry the
# conv and recurrent states across spans. See tests/unit/test_decode_steps.c.
set -euo pipefail
: "${EMBER_BUILD:?}" "${EMBER_SRC:?}"
exec "$EMBER_BUILD/tests/test_decode_steps" "$EMBER_SRC"/tests/golden/qwen3_5/*/
