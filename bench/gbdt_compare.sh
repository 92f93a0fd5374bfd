#!/usr/bin/env bash
# Slipway's GBDT against XGBoost (Debian's python3-xgboost) on the same rows and features: binary
# logistic, depth 6, eta 0.1, 255 bins. Prints test AUC of both and the median training time (the
# training call alone on both sides, binning included) at 1 and 2 threads, with the ratio.
# Usage: bench/gbdt_compare.sh [BUILD_DIR] [DATASET] [SEEDS...]
#   DATASET lending (200 rounds, 3 repeats; default) or synthetic (1M x 28, 100 rounds, 3 repeats)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
dataset=${2:-lending}
shift 2 || shift $#
seeds=${*:-1 2 3}
rounds=200
[[ $dataset == synthetic ]] && rounds=100
repeats=3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for seed in $seeds; do
  for threads in 1 2; do
    peer=$(/usr/bin/python3 "$root/bench/gbdt_peer.py" "$dataset" "$seed" "$threads" "$rounds" "$repeats" "$work")
    results=()
    for _ in $(seq "$repeats"); do
      results+=("$("$build/slipway" --home "$work/ws" --json -q train --data "$work/train.csv" --test "$work/test.csv" \
        --target label --model gbdt --param rounds="$rounds" --param max_depth=6 --param objective=binary:logistic \
        --threads "$threads" --no-progress)")
    done
    /usr/bin/python3 - "$dataset" "$seed" "$threads" "$peer" "${results[@]}" <<'PY'
import json, statistics, sys
dataset, seed, threads, peer = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
runs = [json.loads(text) for text in sys.argv[5:]]
seconds = statistics.median(run["train_seconds"] for run in runs)
auc = runs[0]["metrics"]["overall"]["auc"]
print(f"{dataset} seed {seed} threads {threads}: AUC slipway {auc:.4f} xgboost {peer['auc']:.4f} "
      f"(diff {auc - peer['auc']:+.4f}); train slipway {seconds:.3f} s xgboost {peer['train_seconds']:.3f} s "
      f"ratio {seconds / peer['train_seconds']:.2f}")
PY
  done
done
