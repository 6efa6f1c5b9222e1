#!/usr/bin/env bash
# A fake Hugging Face cache (snapshots/<rev>/file -> ../../blobs/<hash>, as
# the real one): `ember ls`, name resolution (unique substring, exact name,
# ambiguity with candidates), inspect by name, generate by name, and
# `ember config` sources and unknown-variable suggestions.
set -euo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hub="$tmp/hf/hub"

add_model() { # add_model org--name rev golden_dir [with_ref]
    local d="$hub/models--$1"
    mkdir -p "$d/blobs" "$d/snapshots/$2" "$d/refs"
    for f in "$3"/config.json "$3"/model.safetensors "$3"/generation_config.json; do
        local h; h=$(sha256sum "$f" | cut -c1-40)
        cp "$f" "$d/blobs/$h"
        ln -s "../../blobs/$h" "$d/snapshots/$2/$(basename "$f")"
    done
    if [ "${4:-}" = ref ]; then echo "$2" > "$d/refs/main"; fi
}
g="$EMBER_SRC/tests/golden/dense"
add_model acme--tiny-llama-gqa 1111aaaa "$g/llama_gqa_tied" ref
add_model acme--tiny-qwen3 2222bbbb "$g/qwen3_qknorm" ref
add_model other--tiny-qwen2 3333cccc "$g/qwen2_bias"
# an older revision beside refs/main must not be picked
mkdir -p "$hub/models--acme--tiny-qwen3/snapshots/0000old"
# a model ember cannot run
mkdir -p "$hub/models--acme--gpt2/snapshots/4444" && echo '{"model_type":"gpt2","architectures":["GPT2LMHeadModel"]}' > "$hub/models--acme--gpt2/snapshots/4444/config.json"
printf '{"__metadata__":{}}' | python3 -c 'import sys,struct; h=sys.stdin.read().encode(); sys.stdout.buffer.write(struct.pack("<Q",len(h))+h)' > "$hub/models--acme--gpt2/snapshots/4444/model.safetensors"

export HF_HOME="$tmp/hf"
out=$("$EMBER_BIN" ls)
echo "$out"
grep -q "acme/tiny-llama-gqa .*llama .*none .*yes" <<<"$out"
grep -q "acme/tiny-qwen3 .*qwen3 .*yes" <<<"$out"
grep -q "acme/gpt2 .*no: .*not supported" <<<"$out"
"$EMBER_BIN" ls --json | python3 -c '
import json,sys
d = {m["name"]: m for m in json.load(sys.stdin)}
assert d["acme/tiny-qwen3"]["revision"] == "2222bbbb", d["acme/tiny-qwen3"]
assert d["other/tiny-qwen2"]["revision"] == "3333cccc"
assert d["acme/tiny-llama-gqa"]["bytes"] > 1000
assert d["acme/tiny-llama-gqa"]["implementation"] == "dense"
assert not d["acme/gpt2"]["runnable"]
'

# resolution: unique substring, exact name part, ambiguity, no match
"$EMBER_BIN" inspect llama-gqa | grep -q "snapshots/1111aaaa"
"$EMBER_BIN" inspect tiny-qwen3 | grep -q "Qwen3ForCausalLM"
"$EMBER_BIN" inspect ACME/TINY-QWEN2 >/dev/null 2>&1 && { echo "org mismatch resolved"; exit 1; }
"$EMBER_BIN" inspect other/tiny-qwen2 | grep -q "Qwen2ForCausalLM"
if "$EMBER_BIN" inspect qwen 2>"$tmp/err"; then echo "ambiguous name resolved"; exit 1; fi
grep -q "qwen matches 2 cached models: acme/tiny-qwen3, other/tiny-qwen2" "$tmp/err"
if "$EMBER_BIN" inspect nothing-like-it 2>"$tmp/err"; then exit 1; fi
grep -q "no model in the Hugging Face cache" "$tmp/err"
"$EMBER_BIN" generate tiny-llama --ids 1,2,3 --max-tokens 2 --print-ids --temperature 0 | grep -Eq '^[0-9]+ [0-9]+$'
HF_HOME= HF_HUB_CACHE="$hub" "$EMBER_BIN" inspect --json tiny-qwen3 | python3 -c '
import json,sys
d = json.load(sys.stdin)
assert d["implementation"] == "dense" and d["runnable"]
assert len(d["fingerprints"]["config"]) == 16 and len(d["fingerprints"]["artifact"]) == 16
assert d["dtypes"]["BF16"]["tensors"] == d["tensors"]
assert d["tied_embeddings"] is False and d["context_length"] == 256
'
# inspect of a model ember cannot run still describes it
"$EMBER_BIN" inspect gpt2 | grep -q "implementation  none: .*gpt2"

# ember config: sources and suggestions
out=$(EMBER_CTX=64 EMBER_THRAEDS=2 "$EMBER_BIN" config --port 9999 2>"$tmp/err")
grep -q "EMBER_CTX *64 *env" <<<"$out"
grep -q "EMBER_PORT *9999 *flag" <<<"$out"
grep -q "EMBER_HOST *127.0.0.1 *default" <<<"$out"
grep -q "did you mean EMBER_THREADS" "$tmp/err"
EMBER_API_KEY=secret "$EMBER_BIN" config | grep -q "EMBER_API_KEY *\*\*\*\*\*\*\*\* *env"
if "$EMBER_BIN" config --port 0 2>/dev/null; then echo "bad flag accepted"; exit 1; fi
echo ok
