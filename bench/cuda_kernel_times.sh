#!/usr/bin/env bash
# cuda_kernel_times.sh — where a CUDA run's GPU time goes, kernel by kernel.
#
#   bench/cuda_kernel_times.sh EMBER_BIN MODEL [ember bench options...]
#
# Runs `ember bench MODEL --device cuda --warmup 0 OPTIONS` under Nsight
# Compute (ncu, clocks left as the card has them, kernels serialised, CUDA
# graphs off so every kernel is seen) and prints each kernel's total time,
# launch count and share of the whole, largest first. Kernel times under ncu
# are those of each kernel run alone: launch gaps and overlap are not in
# them. Example, a 4,096-token prefill in one forward:
#
#   bench/cuda_kernel_times.sh build/ember /tmp/q4 --prompt-tokens 4096 \
#       --prefill-chunk 4096 --gen-tokens 1
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ember=$1 model=$2; shift 2
command -v ncu >/dev/null || { echo "cuda_kernel_times: ncu (Nsight Compute) is not installed" >&2; exit 2; }
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
EMBER_CUDA_GRAPHS=0 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    "$ember" bench "$model" --device cuda --warmup 0 "$@" >"$csv" 2>/dev/null
python3 - "$csv" <<'PY'
import csv, sys, collections
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
tot, cnt = collections.Counter(), collections.Counter()
rows = [l for l in open(sys.argv[1], encoding="utf-8", errors="replace") if l.startswith('"')]
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].split("(")[0].split("<")[0].strip()
    tot[name] += float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1.0)
    cnt[name] += 1
whole = sum(tot.values())
if not whole:
    sys.exit("cuda_kernel_times: ncu recorded no kernels")
print(f"{'kernel':<48} {'launches':>8} {'total us':>12} {'share':>7}")
for name, us in tot.most_common():
    print(f"{name[:48]:<48} {cnt[name]:>8} {us:>12.1f} {100 * us / whole:>6.1f}%")
print(f"{'all kernels':<48} {sum(cnt.values()):>8} {whole:>12.1f}")
PY
