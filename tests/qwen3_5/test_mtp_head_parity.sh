#!/usr/bin/env bash
# The PyTorch MTP head used for training (tools/train_demo/mtp_head.py) drafts
# exactly what ember's head drafts: see mtp_head_parity.py. Needs a Python with
# torch and numpy (python3, else /usr/bin/python3); skipped without one.
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch, numpy" 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "SKIP: no Python with torch and numpy"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PYTHONDONTWRITEBYTECODE=1 "$py" "$EMBER_SRC/tests/qwen3_5/mtp_head_parity.py" "$EMBER_BIN" "$W"
