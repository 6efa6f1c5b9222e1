#!/usr/bin/env bash
# Differential test: every micro-template under tests/chat/micro/*.txt is
# rendered by ember and by jinja2 (tools/oracle/jinja_render.py, configured
# as transformers configures it); outputs must be byte-identical and errors
# must agree.
set -eu
command -v python3 >/dev/null && python3 -c 'import jinja2' 2>/dev/null || { echo "python3-jinja2 missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$EMBER_SRC/tests/chat/micro/to_jsonl.py" "$EMBER_SRC"/tests/chat/micro/*.txt > "$tmp/cases.jsonl"
export EMBER_TEMPLATE_NOW=1700000000 TZ=UTC
python3 "$EMBER_SRC/tools/oracle/jinja_render.py" --batch "$tmp/cases.jsonl" > "$tmp/ref.jsonl"
"$EMBER_BIN" template --batch "$tmp/cases.jsonl" > "$tmp/got.jsonl"
python3 "$EMBER_SRC/tests/chat/micro/compare.py" "$tmp/cases.jsonl" "$tmp/ref.jsonl" "$tmp/got.jsonl"
