#!/usr/bin/env bash
# quant_kl.sh — what quantization costs a model, with and without rotation.
#
#   bench/quant_kl.sh EMBER_BIN MODEL TEXT WORK_DIR [--bits "8 6 4 3 2"] [--group-size G]
#                     [--seeds "0 1 2"] [--search] [--ctx N] [--max-tokens N] [--device D]
#                     [--recipe FILE] [--rotate-keep N] [--online]
#
# For each bit width: `ember quantize` round-to-nearest, and `--rotate` once per
# seed (several seeds show how much of a difference is the seed's luck); then
# `ember kl MODEL CANDIDATE --text TEXT` for each. Prints a markdown table of
# mean KL (nats per token, reference || candidate), the rotated mean's change
# against round-to-nearest, the spread over seeds, and top-1 agreement (also
# WORK_DIR/quant_kl.md; raw lines in WORK_DIR/quant_kl.jsonl). --search applies
# `ember quantize --search` to both. Artifacts are removed after scoring.
# --device runs the kl verb there (EMBER_DEVICE: cpu, cuda or cuda:N; default:
# the environment's); quantizing always runs on the CPU. --recipe hands a
# mixed-precision recipe to `ember quantize` (--bits overrides its default width;
# its rules, such as {"match": "model.layers.*", "quantize": false}, still apply).
# --rotate-keep N rotates with `--rotate-keep N` (residual channels kept out of R1).
# --online rotates with `--rotate-online` instead (each block's input rotated at
# run time; the Llama family).
set -uo pipefail
usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 4 ] || usage
ember=$1 model=$2 text=$3 work=$4; shift 4
bits="8 6 4 3 2" group=64 seeds="0 1 2" search=() klargs=() klenv=() recipe=() keep=() rotflag=--rotate
while [ $# -gt 0 ]; do
  case $1 in
    --bits) bits=${2:?}; shift ;;
    --group-size) group=${2:?}; shift ;;
    --seeds) seeds=${2:?}; shift ;;
    --search) search=(--search) ;;
    --ctx|--max-tokens) klargs+=("$1" "${2:?}"); shift ;;
    --device) klenv=("EMBER_DEVICE=${2:?}"); shift ;;
    --recipe) recipe=(--recipe "${2:?}"); shift ;;
    --rotate-keep) keep=(--rotate-keep "${2:?}"); shift ;;
    --online) rotflag=--rotate-online ;;
    -h|--help) usage ;;
    *) echo "quant_kl: unknown option $1" >&2; usage ;;
  esac
  shift
done
[ -x "$ember" ] || { echo "quant_kl: $ember is not an executable" >&2; exit 2; }
[ -f "$model/config.json" ] || { echo "quant_kl: $model has no config.json" >&2; exit 2; }
[ -f "$text" ] || { echo "quant_kl: no text file $text" >&2; exit 2; }
mkdir -p "$work" || exit 2
res="$work/quant_kl.jsonl"
: >"$res"

# score CANDIDATE_DIR BITS KIND SEED: one JSON line with the kl verb's figures
score() {
  local out
  if ! out=$(env "${klenv[@]}" "$ember" kl "$model" "$1" --text "$text" "${klargs[@]}" 2>&1); then
    echo "{\"bits\": $2, \"kind\": \"$3\", \"seed\": $4, \"error\": $(tail -1 <<<"$out" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}" >>"$res"
    return
  fi
  python3 - "$2" "$3" "$4" "$out" >>"$res" <<'PY'
import json, re, sys
bits, kind, seed, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
m = re.search(r"kl mean ([0-9.eE+-]+) max ([0-9.eE+-]+) nats over (\d+) positions; top-1 agreement ([0-9.]+)", out)
if not m:
    print(json.dumps({"bits": bits, "kind": kind, "seed": seed, "error": "unreadable: " + out[-200:]}))
else:
    print(json.dumps({"bits": bits, "kind": kind, "seed": seed, "kl": float(m[1]), "kl_max": float(m[2]),
                      "positions": int(m[3]), "top1": float(m[4])}))
PY
}

for b in $bits; do
  d="$work/q$b"
  echo "[quant_kl] $b bits, round to nearest" >&2
  if "$ember" quantize "$model" "$d" "${recipe[@]}" --bits "$b" --group-size "$group" "${search[@]}" --force >/dev/null 2>"$work/err.txt"; then
    score "$d" "$b" rtn 0
  else
    echo "{\"bits\": $b, \"kind\": \"rtn\", \"seed\": 0, \"error\": \"quantize failed: $(tail -1 "$work/err.txt" | tr -d '"\\')\"}" >>"$res"
  fi
  rm -rf "$d"
  for s in $seeds; do
    echo "[quant_kl] $b bits, rotated (seed $s)" >&2
    if "$ember" quantize "$model" "$d" "${recipe[@]}" --bits "$b" --group-size "$group" "${search[@]}" "$rotflag" "${keep[@]}" --seed "$s" --force \
        >/dev/null 2>"$work/err.txt"; then
      score "$d" "$b" rotate "$s"
    else
      echo "{\"bits\": $b, \"kind\": \"rotate\", \"seed\": $s, \"error\": \"quantize failed: $(tail -1 "$work/err.txt" | tr -d '"\\')\"}" >>"$res"
    fi
    rm -rf "$d"
  done
done

[ "$rotflag" = --rotate-online ] && keep=(--rotate-online)
python3 - "$res" "$group" "${search[*]:-}" "${keep[*]:-}" <<'PY' | tee "$work/quant_kl.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
group, search, keep = sys.argv[2], sys.argv[3], sys.argv[4]
print(f"\nGroup size {group}{', --search' if search else ''}{', rotated with ' + keep if keep else ''}. Mean KL in nats per token (lower is better).\n")
print("| bits | KL round-to-nearest | KL rotated (mean of seeds) | change | rotated, per seed | top-1 RTN | top-1 rotated |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for b in sorted({r["bits"] for r in rows}, reverse=True):
    rtn = [r for r in rows if r["bits"] == b and r["kind"] == "rtn" and "kl" in r]
    rot = [r for r in rows if r["bits"] == b and r["kind"] == "rotate" and "kl" in r]
    errs = [r["error"] for r in rows if r["bits"] == b and "error" in r]
    if not rtn or not rot:
        print(f"| {b} | {'; '.join(errs) or 'missing'} | | | | | |")
        continue
    k0, k1 = rtn[0]["kl"], statistics.mean(r["kl"] for r in rot)
    per = ", ".join(f"{r['kl']:.4f}" for r in rot)
    t1 = statistics.mean(r["top1"] for r in rot)
    print(f"| {b} | {k0:.4f} | {k1:.4f} | {100 * (k1 - k0) / k0:+.1f} % | {per} | {rtn[0]['top1']:.4f} | {t1:.4f} |")
PY
