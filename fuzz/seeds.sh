#!/usr/bin/env bash
# fuzz/seeds.sh — writes a starting corpus for one libFuzzer harness from the
# repository's own test inputs, so that the fuzzer starts past the syntax of
# its format instead of spending its time rediscovering it.
#
#   fuzz/seeds.sh HARNESS DIR      (then: build-fuzz/fuzz/fuzz_HARNESS DIR)
#
# HARNESS is one of:
#   grammar          JSON Schemas of tests/grammar/schemas (the harness's mode
#                    byte 2), a GBNF and a regex, each with a text to match
#   jinja_parse,     the template constructs of tests/chat/micro/constructs.txt,
#   jinja_render     the demo model's chat template, and the chat templates of
#                    the npm tokenizers in ~/.cache/ember-test where a test run
#                    has fetched them
#   model_config     the golden checkpoints' config.json files
#   tokenizer_load   fuzz/corpus/tokenizer_load (use -dict=fuzz/tokenizer_load.dict)
# DIR is created if missing; the fuzzer adds what it finds to it.
set -euo pipefail
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
if [[ $# -ge 1 && ($1 == -h || $1 == --help) ]]; then usage; exit 0; fi
if [[ $# -ne 2 ]]; then usage >&2; exit 2; fi
harness=$1 dir=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"

case $harness in
grammar)
    for f in "$root"/tests/grammar/schemas/*.json; do
        { printf '\002'; cat "$f"; } >"$dir/schema-$(basename "$f" .json)"
    done
    printf '\000root ::= "a" [0-9]+ ("x" | "y")* item\nitem ::= "!" | [a-z]{1,3}\n\000a12xy!' >"$dir/gbnf"
    printf '\001[a-c]+(x|y)?\\d{2,4}\000abx123' >"$dir/regex"
    ;;
jinja_parse | jinja_render)
    python3 - "$root/tests/chat/micro/constructs.txt" "$dir" <<'EOF'
import sys
text, out = open(sys.argv[1]).read(), sys.argv[2]
n = 0
for part in text.split("\n### "):
    body = part.split("\n", 1)[1] if "\n" in part else ""
    if body.strip():
        open(f"{out}/construct-{n}", "w").write(body)
        n += 1
EOF
    python3 - "$dir" "$root/models/demo/tokenizer_config.json" \
        "$HOME"/.cache/ember-test/npm-tokenizers/*/tokenizer_config.json <<'EOF'
import json, os, sys
out = sys.argv[1]
for path in sys.argv[2:]:
    if not os.path.isfile(path):
        continue
    t = json.load(open(path)).get("chat_template")
    if isinstance(t, list):  # named templates: the first
        t = t[0].get("template") if t and isinstance(t[0], dict) else None
    if isinstance(t, str):
        name = os.path.basename(os.path.dirname(path))
        open(f"{out}/template-{name}", "w").write(t)
EOF
    ;;
model_config)
    for f in "$root"/tests/golden/*/*/config.json; do
        cp "$f" "$dir/$(basename "$(dirname "$(dirname "$f")")")-$(basename "$(dirname "$f")").json"
    done
    ;;
tokenizer_load)
    cp "$root"/fuzz/corpus/tokenizer_load/* "$dir/"
    ;;
*)
    echo "seeds.sh: no seeds for '$harness' (grammar, jinja_parse, jinja_render, model_config, tokenizer_load)" >&2
    exit 2
    ;;
esac
echo "$(find "$dir" -maxdepth 1 -type f | wc -l) files in $dir"
