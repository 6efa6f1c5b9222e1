#!/usr/bin/env bash
# mtp_acceptance.sh — speculative decoding with a model's MTP head, measured by
# `ember bench`: for each prompt, plain greedy decoding and --spec mtp with
# 1, 2 and 3 draft tokens; prints the acceptance rate (accepted / drafted),
# tokens per trunk step and the decode speed-up over plain decoding.
#
#   bench/mtp_acceptance.sh MODEL_DIR [PROMPT_FILE...]
#
# Prompts: random token ids (what `ember bench` uses by default; acceptance on
# them says little), MODEL_DIR/bench_prompt_text.txt and bench_prompt_chat.txt
# when present (train_qwen3_5_mtp.py writes them), and any PROMPT_FILE given.
# Environment: EMBER_BIN (default: build/ember of this checkout, else `ember`),
# DEVICE (cpu), PROMPT_TOKENS (64), GEN_TOKENS (128), DRAFTS ("1 2 3"),
# REPEAT (3; the best run of each counts), THREADS (ember's default if unset).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
model=$1; shift
[ -f "$model/config.json" ] || { echo "mtp_acceptance: $model/config.json not found" >&2; exit 2; }
ember=${EMBER_BIN:-}
if [ -z "$ember" ]; then
  if [ -x "$here/build/ember" ]; then ember="$here/build/ember"; else ember=$(command -v ember || true); fi
fi
[ -n "$ember" ] && [ -x "$ember" ] || { echo "mtp_acceptance: no ember binary (set EMBER_BIN)" >&2; exit 2; }
device=${DEVICE:-cpu} np=${PROMPT_TOKENS:-64} ng=${GEN_TOKENS:-128} drafts=${DRAFTS:-1 2 3} repeat=${REPEAT:-3}
common=(--device "$device" --prompt-tokens "$np" --gen-tokens "$ng" --repeat "$repeat" --json)
[ -n "${THREADS:-}" ] && common+=(--threads "$THREADS")

prompts=(random)
for f in "$model/bench_prompt_text.txt" "$model/bench_prompt_chat.txt" "$@"; do
  if [ -f "$f" ]; then prompts+=("$f"); elif [ "$f" != "$model/bench_prompt_text.txt" ] && [ "$f" != "$model/bench_prompt_chat.txt" ]; then
    echo "mtp_acceptance: prompt file $f not found" >&2; exit 2
  fi
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "ember: $ember; model: $model; device $device; $np prompt tokens (at most), $ng generated, greedy"
for p in "${prompts[@]}"; do
  pf=(); [ "$p" = random ] || pf=(--prompt-file "$p")
  label=$([ "$p" = random ] && echo random || basename "$p")
  for k in 0 $drafts; do
    spec=(); [ "$k" = 0 ] || spec=(--spec mtp --draft-tokens "$k")
    echo "+ ember bench $model ${common[*]} ${pf[*]} ${spec[*]}" >&2
    if out=$("$ember" bench "$model" "${common[@]}" "${pf[@]}" "${spec[@]}" 2>&1); then
      printf '%s\t%s\t%s\n' "$label" "$k" "$(grep '^{' <<<"$out" | tr '\n' ' ')" >>"$results"
    else
      printf '%s\t%s\tERROR %s\n' "$label" "$k" "$(tr '\n' ' ' <<<"$out")" >>"$results"
    fi
  done
done

python3 - "$results" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t", 2) for l in open(sys.argv[1]) if l.strip()]
base = {}
print()
print("| prompt | prompt tokens | drafts K | decode tok/s | acceptance | tokens / trunk step | speed-up |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for label, k, body in rows:
    if body.startswith("ERROR"):
        print("| %s | | %s | %s | | | |" % (label, k or "plain", body[6:].strip()[:160].replace("|", "/")))
        continue
    objs = [json.loads(x) for x in body.replace("} {", "}\n{").split("\n") if x.strip()]
    main = next(o for o in objs if "decode_tps" in o)
    spec = next((o for o in objs if o.get("spec")), None)
    tps = main["decode_tps"]
    if k == "0":
        base[label] = tps
        print("| %s | %d | plain | %.1f | | 1.00 | 1.00x |" % (label, main["prompt_tokens"], tps))
        continue
    b = base.get(label)
    sp = ("%.2fx" % (tps / b)) if b else "?"
    if spec:
        print("| %s | %d | %s | %.1f | %.1f%% | %.2f | %s |" % (label, main["prompt_tokens"], k, tps,
              100 * spec["acceptance_rate"], spec["tokens_per_trunk_step"], sp))
    else:
        print("| %s | %d | %s | %.1f | (no spec line) | | %s |" % (label, main["prompt_tokens"], k, tps, sp))
PY
