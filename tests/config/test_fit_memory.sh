#!/usr/bin/env bash
# ember fit against measured peaks: for synthetic checkpoints (f32 untied,
# bf16 tied, KV-heavy) and several contexts, the predicted peak must be
# within 10% of the VmHWM `ember generate --stats` reports. Also: the budget
# decides fits / does not fit, and the largest context is consistent.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
if [ "${EMBER_SANITIZED:-}" = 1 ]; then echo "skipped: sanitizers change resident memory"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mk="$EMBER_SRC/tests/support/make_synthetic_model.py"
#            dir       hidden heads kv hd  inter layers vocab dtype tied max_pos
python3 "$mk" "$tmp/a" 256    16    16 128 512   4      4096  F32   0    4096
python3 "$mk" "$tmp/b" 512    8     2  64  1408  6      8192  BF16  1    2048
python3 "$mk" "$tmp/c" 128    8     8  128 256   4      2048  F32   0    2048

ids() { python3 -c "print(','.join(str(i % 100 + 1) for i in range($1)))"; }
fail=0
for spec in "a 64" "b 300" "c 40" "c 400"; do
    set -- $spec
    n=$2
    pred=$("$EMBER_BIN" fit "$tmp/$1" --ctx $((n + 2)) --threads 2 --json |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])')
    meas=$("$EMBER_BIN" generate "$tmp/$1" --ids "$(ids "$n")" --max-tokens 2 --ignore-eos --threads 2 --stats 2>&1 >/dev/null |
           sed -n 's/^peak resident memory \([0-9]*\) bytes$/\1/p')
    ratio=$(python3 -c "print(f'{$pred / $meas:.3f}')")
    echo "model $1, context $((n + 2)): predicted $pred, measured $meas, ratio $ratio"
    python3 -c "import sys; sys.exit(0 if abs($pred / $meas - 1) <= 0.10 else 1)" || fail=1
done
[ "$fail" = 0 ]

# the budget decides; the largest context that fits is where the prediction crosses it
j=$("$EMBER_BIN" fit "$tmp/c" --ctx 1000 --memory-budget 40000000 --json || true)
python3 - "$j" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert not d["fits"] and d["peak_bytes"] > 40000000, d
assert 0 < d["max_context"] < 1000, d
assert d["kv_bytes_per_token"] == 4 * 2 * 8 * 128 * 4, d
PY
max=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['max_context'])" "$j")
"$EMBER_BIN" fit "$tmp/c" --ctx "$max" --memory-budget 40000000 >/dev/null
if "$EMBER_BIN" fit "$tmp/c" --ctx $((max + 1)) --memory-budget 40000000 >/dev/null; then echo "fits past max_context"; exit 1; fi
"$EMBER_BIN" fit "$tmp/b" --ctx 100 --batch 4 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["kv_bytes"] == 6 * 2 * 2 * 64 * 4 * 128 * 4, d  # 100 positions -> 4 blocks of 32, 4 sequences
'
echo ok
