#!/usr/bin/env bash
# MLP training against PyTorch in one run: the step time of 28 -> 256 -> 256 -> 1 (ReLU, batch 256,
# AdamW) in float32 and bfloat16, ours (bench/mlp_train_bench.cpp: a whole epoch of train::fit over
# 100 steps, so it includes the input pipeline) and PyTorch's (Debian's python3-torch,
# bench/mlp_train_peer.py: the step alone), on 1 and 2 threads; then the quality of bf16 against
# float32 training on the real data sets (test AUC or RMSE of `slipway train --model mlp`).
# Usage: bench/mlp_train_peer.sh [BUILD_DIR]   (build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -c "import torch" 2> /dev/null || { echo "mlp_train_peer.sh needs python3-torch" >&2; exit 2; }
"$build/bench/slipway_bench" --benchmark_filter='BM_MlpTrainEpoch' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_out="$work/ours.json" \
  --benchmark_out_format=json > /dev/null
/usr/bin/python3 "$root/bench/mlp_train_peer.py" > "$work/torch.json"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
torch = json.load(open(f"{work}/torch.json"))
ours = {}
for b in json.load(open(f"{work}/ours.json"))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        _, precision, threads = b["run_name"].split("/")[:3]
        ours[("bfloat16" if precision == "1" else "float32", int(threads))] = b["step_seconds"]
print(f"training step, 28 -> 256 -> 256 -> 1, batch 256 (ms per step, medians; PyTorch {torch['torch']})")
print(f"{'':22}{'ours':>8}{'PyTorch':>9}{'PyTorch/ours':>14}")
for threads in (1, 2):
    for precision in ("float32", "bfloat16"):
        mine, peer = ours[(precision, threads)], torch[f"{precision}_threads{threads}"]
        print(f"{precision:9} {threads} thread{'s' if threads > 1 else ' '}  {mine * 1e3:>8.2f}{peer * 1e3:>9.2f}{peer / mine:>14.2f}")
    print(f"{'':10}bf16/fp32 step time: ours {ours[('bfloat16', threads)] / ours[('float32', threads)]:.2f}, "
          f"PyTorch {torch[f'bfloat16_threads{threads}'] / torch[f'float32_threads{threads}']:.2f}")
PY
echo
echo "quality, bf16 against float32 training (slipway train --model mlp, seed 42, test split 20%)"
cd "$work"
"$build/slipway" init > /dev/null
quality() {  # NAME FILE TARGET METRIC [ARGS...]
  local name=$1 file=$2 target=$3 metric=$4
  shift 4
  local line="$name"
  for precision in float32 bfloat16; do
    value=$("$build/slipway" --json train --data "$file" --target "$target" --model mlp --no-progress --no-cache \
      --param precision=$precision "$@" 2> /dev/null |
      /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['metrics']['overall']['$metric'])")
    line="$line $precision $metric $value"
  done
  echo "$line"
}
quality lending_club "$root/data/lending_club.csv" Class auc --split stratified
quality chicago "$root/data/chicago_ridership.csv" ridership rmse --ignore date
[ -f "$root/../shared/data/diamonds.csv" ] && quality diamonds "$root/../shared/data/diamonds.csv" price rmse
exit 0
