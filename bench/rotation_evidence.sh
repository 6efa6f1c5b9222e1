#!/usr/bin/env bash
# rotation_evidence.sh — does `ember quantize --rotate` lower the KL of a model we
# train ourselves? One command on a CUDA machine with torch and transformers.
#
#   bench/rotation_evidence.sh EMBER_BIN CORPUS_DIR WORK_DIR [--budget S] [--eval-chars N]
#                              [--bits "8 6 4 3 2"] [--seeds "0 1 2"] [--device D]
#                              [--model DIR] [train.py options...]
#
# 1. trains a small Llama with tools/train_demo/train.py on CORPUS_DIR (made by
#    tools/train_demo/prepare_corpus.py) for --budget seconds (default 300), with
#    --skip-checks and any other options given (--schedule constant,
#    --weight-decay 0, ...), into WORK_DIR/model; --model DIR skips this and
#    measures DIR instead;
# 2. prints tools/train_demo/weight_stats.py for it: how heavy-tailed its
#    weights are within groups, and the error rotation is expected to save;
# 3. writes WORK_DIR/eval.txt: about --eval-chars characters (default 16000,
#    some 4k tokens) of the documents train.py holds out (every 50th), taken
#    from each source in turn;
# 4. runs bench/quant_kl.sh EMBER_BIN WORK_DIR/model WORK_DIR/eval.txt WORK_DIR/kl
#    with --bits and --seeds (--device D: where `ember kl` runs; default the CPU,
#    fastest for a model this small), then at 4 bits (seed 0) twice more, with
#    only the embedding and head quantized and with only the decoder layers, to
#    show where rotation gains or loses; prints the tables, the full one last.
# Each stage is stamped with the clock and the seconds since the start.
set -uo pipefail
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 3 ] || usage
ember=$1 corpus=$2 work=$3; shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
budget=300 eval_chars=16000 bits="8 6 4 3 2" seeds="0 1 2" klopts=() train=() model=
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=${2:?}; shift ;;
    --eval-chars) eval_chars=${2:?}; shift ;;
    --bits) bits=${2:?}; shift ;;
    --seeds) seeds=${2:?}; shift ;;
    --device) klopts=(--device "${2:?}"); shift ;;
    --model) model=${2:?}; shift ;;
    -h|--help) usage ;;
    *) train+=("$1") ;;
  esac
  shift
done
[ -x "$ember" ] || { echo "rotation_evidence: $ember is not an executable" >&2; exit 2; }
[ -f "$corpus/text.jsonl" ] || { echo "rotation_evidence: $corpus has no text.jsonl (prepare_corpus.py)" >&2; exit 2; }
mkdir -p "$work" || exit 2
ember=$(cd "$(dirname "$ember")" && pwd)/$(basename "$ember")
t0=$SECONDS
stamp() { printf '[%s +%4ds] %s\n' "$(date +%H:%M:%S)" $((SECONDS - t0)) "$*"; }

if [ -z "$model" ]; then
  model=$work/model
  stamp "training: train.py --budget $budget --skip-checks ${train[*]}"
  # A large --max-steps: the time budget decides the length.
  if ! "$py" "$here/tools/train_demo/train.py" --corpus "$corpus" --out "$model" --budget "$budget" \
      --max-steps 1000000 --skip-checks "${train[@]}" 2>&1 | tee "$work/train.log"; then
    echo "rotation_evidence: training failed (see $work/train.log)" >&2
    exit 1
  fi
elif [ ${#train[@]} -gt 0 ]; then
  echo "rotation_evidence: --model given, so no training; unused options: ${train[*]}" >&2
  exit 2
fi
[ -f "$model/model.safetensors" ] || { echo "rotation_evidence: no $model/model.safetensors" >&2; exit 1; }

stamp "weight statistics"
"$py" "$here/tools/train_demo/weight_stats.py" "$model" >"$work/weight_stats.txt" || exit 1
grep -v '^{' "$work/weight_stats.txt"  # the JSON line stays in the file

stamp "evaluation text"
"$py" - "$corpus" "$work/eval.txt" "$eval_chars" <<'PY' || exit 1
import json, sys
corpus, out, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
docs = [json.loads(l) for l in open(corpus + "/text.jsonl", encoding="utf-8")]
held = {}
for i, d in enumerate(docs):
    if i % 50 == 7:  # train.py's held-out documents
        held.setdefault(d["source"], []).append(d["text"])
parts, n = [], 0
while n < limit and any(held.values()):
    for src in sorted(held):
        if held[src] and n < limit:
            parts.append(held[src].pop(0))
            n += len(parts[-1])
with open(out, "w", encoding="utf-8") as f:
    f.write("\n\n".join(parts) + "\n")
print("%d held-out documents, %d characters -> %s" % (len(parts), n, out))
PY

stamp "quantization KL: bits $bits, seeds $seeds"
bench_kl=("$here/bench/quant_kl.sh" "$ember" "$model" "$work/eval.txt" "$work/kl" --bits "$bits" --seeds "$seeds"
          "${klopts[@]}")
# quant_kl's progress lines (stderr) get stamps; its table (stdout) comes last.
"${bench_kl[@]}" 2>&1 >"$work/kl.out" | while IFS= read -r line; do stamp "$line"; done
rc=${PIPESTATUS[0]}

stamp "4 bits, one part of the model at a time"
echo '{"bits": 4, "group_size": 64, "rules": [{"match": "model.layers.*", "quantize": false}]}' >"$work/recipe_head.json"
echo '{"bits": 4, "group_size": 64, "rules": [{"match": "model.embed_tokens", "quantize": false},
  {"match": "lm_head", "quantize": false}]}' >"$work/recipe_layers.json"
for part in head layers; do
  "$here/bench/quant_kl.sh" "$ember" "$model" "$work/eval.txt" "$work/kl_$part" --bits 4 --seeds 0 "${klopts[@]}" \
    --recipe "$work/recipe_$part.json" >"$work/kl_$part.out" 2>/dev/null
done
stamp "done (quant_kl exit $rc)"
echo
grep '^overall:' "$work/weight_stats.txt"
echo
echo "One part quantized, the rest left bf16 (seed 0):"
echo
grep -m1 '^| bits' "$work/kl.out"
grep -m1 '^| ---' "$work/kl.out"
sed -n 's/^| 4 |/| 4, embedding + head only |/p' "$work/kl_head.out"
sed -n 's/^| 4 |/| 4, decoder layers only |/p' "$work/kl_layers.out"
cat "$work/kl.out"
exit $rc
