#!/usr/bin/env bash
# Slipway's GBDT against XGBoost on the same lending_club rows and features (200 rounds, depth 6,
# eta 0.1): test AUC of both and training time (median of 3; the training call alone on both
# sides, binning included) at 1 and 2 threads, per seed.
# Usage: bench/gbdt_compare.sh [BUILD_DIR] [SEEDS...]   (default build/release, seeds 1 2 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift || true
seeds=${*:-1 2 3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for seed in $seeds; do
  for threads in 1 2; do
    peer=$(/usr/bin/python3 "$root/bench/gbdt_peer.py" "$root/data/lending_club.csv" "$seed" "$threads" "$work")
    results=()
    for _ in 1 2 3; do
      results+=("$("$build/slipway" --home "$work/ws" --json -q train --data "$work/train.csv" --test "$work/test.csv" \
        --target Class --model gbdt --param rounds=200 --param max_depth=6 --threads "$threads")")
    done
    /usr/bin/python3 - "$seed" "$threads" "$peer" "${results[@]}" <<'PY'
import json, statistics, sys
seed, threads, peer = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
runs = [json.loads(text) for text in sys.argv[4:]]
seconds = statistics.median(run["train_seconds"] for run in runs)
auc = runs[0]["metrics"]["overall"]["auc"]
print(f"seed {seed} threads {threads}: AUC slipway {auc:.4f} xgboost {peer['auc']:.4f} (diff {auc - peer['auc']:+.4f});"
      f" train slipway {seconds:.3f} s xgboost {peer['train_seconds']:.3f} s ratio {seconds / peer['train_seconds']:.2f}")
PY
  done
done
