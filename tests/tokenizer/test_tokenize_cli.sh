#!/usr/bin/env bash
# `ember tokenize --jsonl` (encode, with and without special tokens) and
# `--decode --jsonl` against the reference goldens for the four npm
# tokenizers, plus the verb's usage errors. Skips (77) when offline.
set -u
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
dir=$(bash "$EMBER_SRC/tests/support/fetch-npm-tokenizers.sh") || exit 77
gold="$EMBER_SRC/tests/golden/tokenizer"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

"$EMBER_BIN" tokenize --help | grep -q -- "--jsonl" || { echo "FAIL: --help"; fail=1; }
"$EMBER_BIN" tokenize >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: missing DIR is not a usage error"; fail=1; }
"$EMBER_BIN" tokenize "$tmp/nowhere" "x" 2>"$tmp/err"; [ $? -eq 1 ] && grep -q "tokenizer.json" "$tmp/err" || {
  echo "FAIL: missing tokenizer.json not reported"; fail=1; }

for name in qwen3 llama3 gemma3 deepseek_v3; do
  python3 - "$gold" "$name" "$tmp" <<'PY'
import json, sys
gold, name, tmp = sys.argv[1:]
texts = [json.loads(l)["text"] for l in open(f"{gold}/corpus.jsonl", encoding="utf-8")]
recs = [json.loads(l) for l in open(f"{gold}/{name}.jsonl", encoding="utf-8")]
with open(f"{tmp}/enc.jsonl", "w", encoding="utf-8") as f, open(f"{tmp}/enc.want", "w") as w:
    for r in recs:
        for sp in (False, True):
            f.write(json.dumps({"text": texts[r["i"]], "add_special_tokens": sp}, ensure_ascii=False) + "\n")
            w.write(json.dumps(r["ids_sp" if sp else "ids"]) + "\n")
with open(f"{tmp}/dec.jsonl", "w") as f, open(f"{tmp}/dec.want", "w", encoding="utf-8") as w:
    for r in recs:
        for k in ("ids", "ids_sp"):
            f.write(json.dumps(r[k]) + "\n")
            w.write(json.dumps(r["dec" if k == "ids" else "dec_sp"], ensure_ascii=False) + "\n")
PY
  "$EMBER_BIN" tokenize "$dir/$name" --jsonl "$tmp/enc.jsonl" >"$tmp/enc.got" || { echo "FAIL: $name encode exit"; fail=1; }
  "$EMBER_BIN" tokenize "$dir/$name/tokenizer.json" --decode --jsonl "$tmp/dec.jsonl" >"$tmp/dec.got" || {
    echo "FAIL: $name decode exit"; fail=1; }
  python3 - "$tmp" "$name" <<'PY' || fail=1
import json, sys
tmp, name = sys.argv[1:]
def load(p): return [json.loads(l) for l in open(p, encoding="utf-8")]
bad = 0
for what in ("enc", "dec"):
    got, want = load(f"{tmp}/{what}.got"), load(f"{tmp}/{what}.want")
    if len(got) != len(want):
        print(f"FAIL: {name} {what}: {len(got)} lines, want {len(want)}"); bad += 1; continue
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            print(f"FAIL: {name} {what} line {i + 1}: {g!r:.200} != {w!r:.200}"); bad += 1
print(f"{name}: {len(load(f'{tmp}/enc.got'))} encodes, {len(load(f'{tmp}/dec.got'))} decodes, {bad} mismatches")
sys.exit(1 if bad else 0)
PY
done

# Malformed input lines are errors naming the line.
printf '{"text": "a"}\n{"txt": 1}\n' >"$tmp/badin.jsonl"
"$EMBER_BIN" tokenize "$dir/qwen3" --jsonl "$tmp/badin.jsonl" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "line 2" "$tmp/err" || { echo "FAIL: bad jsonl line not reported"; fail=1; }
printf '[1, "x"]\n' >"$tmp/badids.jsonl"
"$EMBER_BIN" tokenize "$dir/qwen3" --decode --jsonl "$tmp/badids.jsonl" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "line 1" "$tmp/err" || { echo "FAIL: bad ids line not reported"; fail=1; }
exit $fail
