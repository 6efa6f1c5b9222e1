#!/usr/bin/env bash
# bench/gpu_ab.sh — compares builds of ember on one GPU in one run, the builds
# alternated so that a card's drift falls on all of them alike.
#
#   bench/gpu_ab.sh WORKDIR NAME=DIR[:VAR=VALUE] [NAME=DIR[:VAR=VALUE] ...]
#
# DIR holds an `ember` (and, where it was built, `ember-gemv-bench`); VAR=VALUE
# runs that build with one environment setting (e.g. sp1=build:EMBER_CUDA_QMLP=1).
# On random-weight models made in WORKDIR (bench/make_random_model.py, then the
# first build's `ember quantize`): an 8-layer Llama-3.1-8B shape, the
# Llama-3.2-1B shape and an 8-layer Qwen3.5-4B shape, at AB_BITS bits (4;
# group 64), it prints
#   - whether every build's greedy ids (64 tokens) equal the first build's,
#   - ember-gemv-bench's products of one layer (µs a call) for each build that has it,
#   - ember bench's decode tok/s (--prompt-tokens 128 --gen-tokens 256), AB_ROUNDS rounds (2).
# AB_SHAPES picks the models ("8b 1b qwen"); AB_BATCH the decode batches ("1"): for
# B > 1 the products take B rows and the decode runs B sequences (--batch B,
# --prompt-tokens 64 --gen-tokens 64). With AB_TESTS=1 it first runs the GPU
# tests each build has (DIR/tests/test_cuda_ops, test_cuda_fused,
# test_decode_steps), under its setting. Exit status 1 when ids differ or a
# test fails.
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
if [[ $# -ge 1 && ($1 == -h || $1 == --help) ]]; then usage; exit 0; fi
if [[ $# -lt 2 ]]; then usage >&2; exit 2; fi
work=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
rounds=${AB_ROUNDS:-2} bits=${AB_BITS:-4} shapes=${AB_SHAPES:-8b 1b qwen} batches=${AB_BATCH:-1}
names=() dirs=() envs=()
for spec in "$@"; do
    name=${spec%%=*} rest=${spec#*=}
    dir=${rest%%:*} env=""
    [[ $rest == *:* ]] && env=${rest#*:}
    [[ -x $dir/ember ]] || { echo "gpu_ab: $dir/ember: not an executable" >&2; exit 2; }
    names+=("$name") dirs+=("$(cd "$dir" && pwd)") envs+=("$env")
done
mkdir -p "$work"

# shape key -> make_random_model.py arguments
model_args() {
    case $1 in
    8b) echo "--shape llama-3.1-8b --layers 8" ;;
    1b) echo "--shape llama-3.2-1b" ;;
    qwen) echo "--shape qwen3.5-4b --layers 8" ;;
    *) echo "gpu_ab: unknown shape $1 (8b, 1b, qwen)" >&2; exit 2 ;;
    esac
}
gemv_shape() { case $1 in 8b) echo 8b ;; 1b) echo 1b ;; qwen) echo qwen3.5-4b ;; esac; }

# Runs build i's binary $2 with the rest of the arguments, under its setting.
run_as() {
    local i=$1 bin=$2
    shift 2
    if [[ -n ${envs[$i]} ]]; then env "${envs[$i]}" "${dirs[$i]}/$bin" "$@"; else "${dirs[$i]}/$bin" "$@"; fi
}

for s in $shapes; do
    m=$work/$s-q$bits
    if [[ ! -f $m/config.json ]]; then
        echo "making $s ($bits bits) in $m" >&2
        # shellcheck disable=SC2046
        python3 "$here/make_random_model.py" "$work/$s-bf16" $(model_args "$s") >/dev/null
        "${dirs[0]}/ember" quantize "$work/$s-bf16" "$m" --bits "$bits" --group-size 64 --force >/dev/null 2>&1
    fi
done

status=0
if [[ ${AB_TESTS:-0} == 1 ]]; then
    echo "## GPU tests"
    for i in "${!names[@]}"; do
        for t in test_cuda_ops test_cuda_fused test_decode_steps; do
            [[ -x ${dirs[$i]}/tests/$t ]] || continue
            rc=0
            EMBER_SRC=$here/.. run_as "$i" "tests/$t" >"$work/test.$t.$i" 2>&1 || rc=$?
            echo "${names[$i]} $t: exit $rc, $(tail -1 "$work/test.$t.$i")"
            [[ $rc == 0 ]] || status=1
        done
    done
fi
echo "## greedy ids (64 tokens) against ${names[0]}"
for s in $shapes; do
    m=$work/$s-q$bits
    for i in "${!names[@]}"; do
        run_as "$i" ember generate "$m" --ids 1,2,3,4,5 --max-tokens 64 --temperature 0 --ignore-eos --print-ids \
            --device cuda >"$work/ids.$s.$i" 2>/dev/null || true
        if [[ $i -gt 0 ]]; then
            if cmp -s "$work/ids.$s.0" "$work/ids.$s.$i" && [[ -s $work/ids.$s.0 ]]; then
                echo "$s ${names[$i]}: same"
            else
                echo "$s ${names[$i]}: DIFFER"
                status=1
            fi
        fi
    done
done

echo "## ember-gemv-bench, µs a call (one layer's products and the head, $bits bits)"
for b in $batches; do
    for s in $shapes; do
        for i in "${!names[@]}"; do
            [[ -x ${dirs[$i]}/ember-gemv-bench ]] || continue
            line=$(run_as "$i" ember-gemv-bench --device cuda --shape "$(gemv_shape "$s")" --bits "$bits" --rows "$b" \
                --seconds 0.3 2>&1 | tail -6 | awk '{printf "%s=%s ", $1, $(NF-2)}') || line="(failed)"
            echo "$s rows $b ${names[$i]}: $line"
        done
    done
done

# decode_args B: ember bench's arguments for a decode of B sequences
decode_args() {
    if [[ $1 == 1 ]]; then echo "--prompt-tokens 128 --gen-tokens 256 --repeat 2"
    else echo "--prompt-tokens 64 --gen-tokens 64 --batch $1"; fi
}
echo "## ember bench decode tok/s (one sequence: --prompt-tokens 128 --gen-tokens 256), $rounds rounds alternated"
for r in $(seq "$rounds"); do
    for b in $batches; do
        for s in $shapes; do
            for i in "${!names[@]}"; do
                # shellcheck disable=SC2046
                line=$(run_as "$i" ember bench "$work/$s-q$bits" --device cuda $(decode_args "$b") 2>&1 |
                    grep -E '^decode' | head -1) || line="(failed)"
                echo "round $r $s batch $b ${names[$i]}: $line"
            done
        done
    done
done
exit $status
